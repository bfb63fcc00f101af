"""The job's table: one entry per JobSettings field, one docs/flags.md row per flag, and settings
that go through the manager's arguments and the stored JSON form unchanged."""

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from distributetrain.cli import jobflags, main as cli
from distributetrain.core import errors, validation
from distributetrain.core.job import jobspec
from distributetrain.core.settings import ELASTIC_MIN_GPUS, JobSettings, PvcMount, RuntimeClassTerms
from harness import strategies
from harness.strategies import LOWER

REPO = Path(__file__).resolve().parents[4]
ROW = re.compile(r"^\| `(--[a-z-]+)(?: ([^`]+))?` \| ([^|]+) \|")


def readme_flags() -> dict[str, tuple[str | None, str]]:
    """The flag table of docs/flags.md: flag -> (metavar, default column)."""
    text = (REPO / "docs" / "flags.md").read_text()
    table = text[text.index("\n## Flags\n"):]
    rows = {}
    for line in table.splitlines():
        if match := ROW.match(line):
            flag, metavar, default = match.groups()
            rows[flag] = (metavar.replace("\\|", "|") if metavar else None, default.strip())
    return rows


def test_the_table_names_every_field_of_the_settings_once():
    stored = [field.name for field in jobspec.FIELDS if field.stored]
    assert sorted(stored) == sorted(f.name for f in dataclasses.fields(JobSettings))
    assert len({field.flag for field in jobspec.FLAGS}) == len(jobspec.FLAGS)


def test_every_flag_has_its_readme_row_with_its_form_and_default():
    rows = readme_flags()
    assert sorted(rows) == sorted(field.flag for field in jobspec.FLAGS)
    for field in jobspec.FLAGS:
        metavar, default = rows[field.flag]
        assert metavar == field.metavar, field.flag
        if default.startswith("`"):
            assert default.strip("`") == field.default_text, field.flag
        elif default == "required":
            assert field.required, field.flag
        elif default == "off":
            assert field.switch, field.flag
        elif default == "none":
            assert field.default in ("", None, ()) and not field.default_text, field.flag
        else:  # said in words: "the manager's", "the pod's memory limit"
            assert default == field.default_help, field.flag


def test_defaults_are_said_as_the_readme_says_them():
    said = {field.flag: field.default_text for field in jobspec.FLAGS}
    assert (said["--worker-ready-timeout"], said["--orphan-timeout"], said["--wait-for-gpus"],
            said["--elastic-timeout"], said["--cpu-per-gpu"], said["--memory-per-gpu"]) == (
        "5m", "5m", "0s", "10m", "2", "8Gi")


names = strategies.names(first=LOWER, max_size=8)
durations = st.one_of(st.integers(0, 10**6).map(float), st.floats(0, 10**7, allow_nan=False))
tolerations = st.builds(
    lambda key, value, effect: validation.toleration(f"{key}{'' if value is None else '=' + value}"
                                                     f"{'' if effect is None else ':' + effect}"),
    names, st.none() | names, st.none() | st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]))


@st.composite
def job_settings(draw) -> JobSettings:
    num_gpus = draw(st.integers(1, 64))
    elastic = draw(st.booleans()) and num_gpus > 1
    queue = "" if elastic else draw(st.sampled_from(["", "team-a"]))
    host_network = draw(st.booleans())
    cpu_m, memory = draw(st.integers(1, 64000)), draw(st.integers(64 * 2**20, 2**40))
    return JobSettings(
        job_name="demo", namespace="ml", num_gpus=num_gpus, image=draw(st.sampled_from(["img:1", "reg:5000/a/b"])),
        port=draw(st.integers(1024, 65535)), host_network=host_network,
        filename=draw(st.sampled_from(["/opt/distributetrain/train.py", "/w/t.py"])),
        script_args=tuple(draw(st.lists(st.text(max_size=5), max_size=3))),
        env=tuple(draw(st.lists(st.tuples(names.map(str.upper), st.text(max_size=5)), max_size=2))),
        env_from_secrets=tuple(draw(st.lists(names, max_size=2))),
        pvcs=tuple(draw(st.lists(st.builds(PvcMount, names, names.map(lambda n: f"/{n}"), st.booleans()),
                                 max_size=2))),
        gpu_resource=draw(st.sampled_from(["nvidia.com/gpu", "amd.com/gpu"])),
        node_selector=tuple(draw(st.lists(st.tuples(names, names), max_size=2))),
        tolerations=tuple(draw(st.lists(tolerations, max_size=2))),
        worker_ready_timeout_s=draw(durations), active_deadline_s=draw(st.none() | durations),
        wait_for_gpus_s=draw(durations), orphan_timeout_s=draw(durations.filter(lambda s: s >= 1)),
        ssh_connect_attempts=draw(st.integers(1, 100)), max_restarts=draw(st.integers(0, 5)),
        min_gpus=draw(st.integers(1, num_gpus)) if elastic else 0, elastic_timeout_s=draw(durations),
        gloo_timeout_s=draw(durations.filter(lambda s: s >= 1)),
        delete_chief=draw(st.booleans()), allow_shared_gpus=draw(st.booleans()), mesh_injection=draw(st.booleans()),
        queue=queue, priority_class=draw(st.sampled_from(["", "high"])) if queue else "",
        lock_namespace=draw(st.sampled_from(["", "locks"])), service_account=draw(st.sampled_from(["", "sa"])),
        cpu_per_gpu_m=cpu_m, memory_per_gpu_bytes=memory,
        shm_size_bytes=draw(st.none() | st.integers(64 * 2**20, 2**40)),
        run_as_user=draw(st.sampled_from(["auto", "platform"]) | st.integers(1, 2**31 - 1)),
        run_as_group=draw(st.none() | st.integers(0, 2**31 - 1)),
        read_only_root_filesystem=draw(st.booleans()),
        image_pull_secrets=tuple(draw(st.lists(names, max_size=2))),
        runtime_class=draw(st.sampled_from(["", "nvidia"])), pod_priority_class=draw(st.sampled_from(["", "high"])),
        termination_grace_period_s=float(draw(st.integers(0, 7200))),
        node_lost_toleration_s=float(draw(st.integers(0, 7200))),
        cpu_limit_per_gpu_m=draw(st.none() | st.integers(cpu_m, 128000)),
        memory_limit_per_gpu_bytes=draw(st.none() | st.integers(memory, 2**41)),
    )


PARSER = cli.build_parser()  # built once: parsing leaves it as it was, and building it was a third of each example


@hypothesis_settings(max_examples=60, deadline=None)
@given(job_settings())
def test_settings_go_through_the_managers_arguments_unchanged(job):
    flags, script_args = jobflags.split_script_args(jobspec.to_args(job))
    args = PARSER.parse_args(["pre-training", *flags, "--job-name", "demo", "--namespace", "ml"])
    with pytest.MonkeyPatch.context() as env:  # a manager pod in namespace ml with no uid or address
        for variable in (jobflags.ENV_POD_UID, jobflags.ENV_POD_IP, jobflags.ENV_POD_NAME):
            env.delenv(variable, raising=False)
        env.setenv(jobflags.ENV_POD_NAMESPACE, "ml")
        assert jobflags.settings_from_args(args, script_args) == job.replace(manager_namespace="ml")


@hypothesis_settings(max_examples=60, deadline=None)
@given(job_settings())
def test_settings_go_through_the_stored_form_unchanged(job):
    job = job.replace(owner_uid="uid-1", manager_namespace="ops", discovery_url="http://10.0.0.9:8470/hosts")
    assert jobspec.from_json(jobspec.to_json(job)) == job
    # What the manager read of the job's RuntimeClass too (docs/job-pods.md#pod-knobs).
    terms = RuntimeClassTerms(overhead=(("cpu", "250m"), ("memory", "160Mi")), node_selector=(("pool", "kata"),),
                              tolerations=({"key": "kata", "operator": "Exists", "effect": "NoSchedule"},))
    read = job.replace(runtime_class="kata", runtime_class_terms=terms)
    assert jobspec.from_json(jobspec.to_json(read)) == read


def test_a_stored_form_of_a_newer_release_reads_what_it_knows():
    stored = jobspec.to_json(JobSettings(job_name="j", namespace="ml", num_gpus=3, image="img:1"))
    newer = stored[:-1] + ',"a_field_of_a_later_release":true}'
    assert jobspec.from_json(newer) == JobSettings(job_name="j", namespace="ml", num_gpus=3, image="img:1")


@pytest.mark.parametrize("text", ["", "[1]", '{"job_name":"j"}', '{"job_name":"j","namespace":"n","num_gpus":1,'
                                                                 '"image":"i","pvcs":["x"]}'])
def test_a_mangled_stored_form_is_a_value_error(text):
    with pytest.raises(ValueError):
        jobspec.from_json(text)


def test_the_flags_given_are_parsed_and_the_others_left_to_the_defaults():
    given = jobspec.parse_given({"num_gpus": "4", "image": "img:1", "node_selector": ["a=b,c=d", "e=f"],
                                 "elastic": True, "shm_size_bytes": "", "worker_ready_timeout_s": "90s"})
    assert given == {"num_gpus": 4, "image": "img:1", "node_selector": (("a", "b"), ("c", "d"), ("e", "f")),
                     "elastic": True, "worker_ready_timeout_s": 90.0}
    with pytest.raises(errors.UsageError) as raised:
        jobspec.parse_given({"num_gpus": "4", "image": "img:1", "port": ""})
    assert raised.value.flag == "--port"


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (300, "5m"), (600, "10m"), (90, "90s"), (7200, "2h"),
                                          (9000, "150m"), (0.5, "500ms"), (1.2345, "1.2345s"), (1e-05, "0.00001s")])
def test_durations_are_written_in_their_shortest_exact_form(seconds, text):
    assert validation.format_duration(seconds) == text
    assert validation.duration_s(text) == seconds


def test_the_managers_arguments_name_what_differs_from_the_defaults_in_the_flags_own_forms():
    job = JobSettings(job_name="demo", namespace="ml", num_gpus=4, image="img:1", owner_uid="u",
                      node_selector=(("pool", "a"), ("zone", "z")), env=(("A", "b=c"),),
                      tolerations=(validation.toleration("k=v:NoSchedule"),), pvcs=(PvcMount("data", "/d", True),),
                      worker_ready_timeout_s=90.0, active_deadline_s=9000.0, min_gpus=2, elastic_timeout_s=600.0,
                      delete_chief=True, cpu_per_gpu_m=1500, memory_per_gpu_bytes=20 * 10**9,
                      script_args=("--epochs", "2"))
    assert jobspec.to_args(job) == [
        "--num-gpus=4", "--image=img:1", "--port=12345", "--filename=/opt/distributetrain/train.py",
        "--host-network=false", "--node-selector=pool=a,zone=z", "--toleration=k=v:NoSchedule", "--env=A=b=c",
        "--pvc=data:/d:ro", "--worker-ready-timeout=90s", "--active-deadline=150m", "--delete-chief", "--elastic",
        "--min-gpus=2", "--cpu-per-gpu=1500m", "--memory-per-gpu=20G", "--", "--epochs", "2"]


@pytest.mark.parametrize("given, why", [
    ({}, "only applies with --wait-for-gpus"),
    ({"wait_for_gpus_s": 300.0, "queue": "team-a"}, "cannot be used with --queue"),
    ({"wait_for_gpus_s": 300.0, "elastic": True}, "cannot be used with --elastic"),
])
def test_scale_up_needs_a_job_that_waits_outside_kueue_and_static(given, why):
    with pytest.raises(errors.UsageError) as raised:
        jobspec.settings({"num_gpus": 12, "image": "img:1", "scale_up_node_gpus": 8, **given},
                         job_name="j", namespace="ml")
    assert raised.value.flag == "--scale-up-node-gpus" and why in str(raised.value)
    job = jobspec.settings({"num_gpus": 12, "image": "img:1", "scale_up_node_gpus": 8, "wait_for_gpus_s": 300.0},
                           job_name="j", namespace="ml")
    assert job.scale_up_node_gpus == 8


def test_the_pod_knobs_are_written_in_their_flags_own_forms():
    job = JobSettings(job_name="demo", namespace="ml", num_gpus=4, image="img:1",
                      image_pull_secrets=("regcred", "mirror"), runtime_class="nvidia", pod_priority_class="high",
                      termination_grace_period_s=300.0, node_lost_toleration_s=180.0, cpu_limit_per_gpu_m=2500,
                      memory_limit_per_gpu_bytes=16 * 2**30)
    assert jobspec.to_args(job)[5:] == [
        "--image-pull-secret=regcred", "--image-pull-secret=mirror", "--runtime-class=nvidia",
        "--pod-priority-class=high", "--termination-grace-period=5m", "--node-lost-toleration=3m",
        "--cpu-limit-per-gpu=2500m", "--memory-limit-per-gpu=16Gi"]
    # At their defaults none is written: a grace of 10 s, a toleration of 30 s, no CPU limit.
    assert jobspec.to_args(JobSettings(job_name="d", namespace="ml", num_gpus=4, image="img:1"))[5:] == []


@pytest.mark.parametrize("given, flag, says", [
    ({"cpu_limit_per_gpu_m": 1500}, "--cpu-limit-per-gpu", "must be at least --cpu-per-gpu (2), got 1500m"),
    ({"cpu_per_gpu_m": 4000, "cpu_limit_per_gpu_m": 3000}, "--cpu-limit-per-gpu",
     "must be at least --cpu-per-gpu (4), got 3"),
    ({"memory_limit_per_gpu_bytes": 4 * 2**30}, "--memory-limit-per-gpu",
     "must be at least --memory-per-gpu (8Gi), got 4Gi"),
])
def test_a_limit_below_its_request_is_bad_input(given, flag, says):
    with pytest.raises(errors.UsageError) as refused:
        jobspec.settings({"num_gpus": 2, "image": "img:1", **given}, job_name="j", namespace="ml")
    assert refused.value.flag == flag and says in str(refused.value)
    equal = {key: value for key, value in given.items() if "limit" not in key}
    limits = {key: equal.get(key.replace("_limit", ""), jobspec.BY_NAME[key.replace("_limit", "")].default)
              for key in given if "limit" in key}
    assert jobspec.settings({"num_gpus": 2, "image": "img:1", **equal, **limits}, job_name="j", namespace="ml")


def test_min_gpus_has_one_default_which_help_says_and_an_elastic_job_gets():
    elastic = jobspec.settings(jobspec.parse_given({"num_gpus": "4", "image": "img", "elastic": True}),
                               job_name="j", namespace="ns")
    static = jobspec.settings(jobspec.parse_given({"num_gpus": "4", "image": "img"}), job_name="j", namespace="ns")
    assert (elastic.min_gpus, static.min_gpus) == (ELASTIC_MIN_GPUS, 0)
    assert jobspec.BY_NAME["min_gpus"].default_text == str(ELASTIC_MIN_GPUS) == readme_flags()["--min-gpus"][1].strip("`")
