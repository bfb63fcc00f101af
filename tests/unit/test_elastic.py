"""Elastic jobs: what discovery answers, when the manager acts, and the host list's server."""

import urllib.error
import urllib.request

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distributetrain import cli, elastic, errors, jobflags, manifests, names, placement, waits
from distributetrain.discovery import DiscoveryServer, HostList, hosts_text
from distributetrain.settings import JobSettings

SETTINGS = JobSettings(job_name="j", namespace="ns", num_gpus=4, image="img:1", min_gpus=2,
                       discovery_url="http://10.0.0.1:8470/hosts")


def pod(name, role, gpus, phase="Running", ready=True, ip="", index=None, exit_code=None, deleting=False):
    labels = {names.LABEL_ROLE: role}
    if index is not None:
        labels[names.LABEL_WORKER_INDEX] = str(index)
    metadata = {"name": name, "labels": labels, "annotations": {names.ANNOTATION_GPUS: str(gpus)}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"phase": phase, "podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if exit_code is not None:
        status["containerStatuses"] = [{"state": {"terminated": {"exitCode": exit_code}}}]
    return {"metadata": metadata, "status": status}


def chief(**kwargs):
    return pod("j-chief", names.ROLE_CHIEF, 1, ip="10.0.1.1", **kwargs)


def worker(index, gpus=1, attempt=0, **kwargs):
    kwargs.setdefault("ip", f"10.0.2.{index}")
    return pod(names.worker_name("j", index, attempt), names.ROLE_WORKER, gpus, index=index, **kwargs)


def by_name(*pods):
    return {p["metadata"]["name"]: p for p in pods}


def test_hosts_are_the_chief_then_ready_workers_with_their_shares():
    pods = by_name(chief(), worker(0, gpus=2), worker(1, ready=False), worker(2), worker(3, deleting=True),
                   worker(4, phase="Failed", exit_code=137))
    assert elastic.ready_hosts(pods, SETTINGS) == (("10.0.1.1", 1), ("10.0.2.0", 2), ("10.0.2.2", 1))


def test_workers_of_another_attempt_are_not_hosts():
    pods = by_name(chief(), worker(0), worker(1, attempt=1))
    assert elastic.ready_hosts(pods, SETTINGS) == (("10.0.1.1", 1), ("10.0.2.0", 1))


def test_judge_reports_a_change_of_hosts_and_nothing_else():
    pods = by_name(chief(), worker(0), worker(1))
    hosts = elastic.ready_hosts(pods, SETTINGS)
    assert elastic.judge_elastic(SETTINGS, ())(pods) == elastic.HostsChanged(hosts)
    assert elastic.judge_elastic(SETTINGS, hosts)(pods) is None
    del pods[names.worker_name("j", 1, 0)]
    assert elastic.judge_elastic(SETTINGS, hosts)(pods) == elastic.HostsChanged(hosts[:2])


def test_a_lost_worker_is_not_the_end_but_a_lost_chief_is():
    pods = by_name(chief(deleting=True), worker(0))
    assert elastic.judge_elastic(SETTINGS, ())(pods) == waits.PodLost("j-chief", "is being deleted")
    assert elastic.judge_elastic(SETTINGS, ())(by_name(worker(0))) == waits.PodLost("j-chief", "was deleted")


def test_the_chief_exit_code_ends_the_job():
    pods = by_name(chief(phase="Succeeded", exit_code=0), worker(0))
    assert elastic.judge_elastic(SETTINGS, ())(pods) == waits.ChiefFinished(0)
    pods = by_name(chief(phase="Failed", exit_code=1), worker(0), worker(1))  # 3 GPUs left >= min 2
    assert elastic.judge_elastic(SETTINGS, ())(pods) == waits.ChiefFinished(1)


def test_a_chief_failing_below_min_gpus_is_blamed_on_the_lost_workers():
    pods = by_name(chief(phase="Failed", exit_code=1), worker(0, phase="Failed", exit_code=137))
    outcome = elastic.judge_elastic(SETTINGS, ())(pods)
    assert isinstance(outcome, waits.PodLost) and "1 of --min-gpus 2" in outcome.reason


def test_replacements_never_reuse_an_index():
    pods = by_name(chief(), worker(0), worker(3, deleting=True))
    assert elastic.next_worker_index(pods) == 4
    assert elastic.next_worker_index(by_name(chief())) == 0


@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 8), min_size=1), st.integers(2, 20))
def test_an_elastic_plan_always_has_a_worker_and_the_same_gpus(free, gpus):
    try:
        plan = placement.plan(free, gpus)
    except placement.InsufficientGPUs:
        return
    split = placement.with_a_worker(plan)
    assert len(split) >= 2
    assert sum(share for _, share in split) == gpus
    assert all(share >= 1 for _, share in split)
    for node in {n for n, _ in split}:
        assert sum(s for n, s in split if n == node) <= free[node]


def get(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


def test_the_server_answers_the_published_hosts_and_refuses_before_any():
    hosts = HostList()
    with DiscoveryServer(hosts, port=0, address="127.0.0.1") as server:
        url = f"http://127.0.0.1:{server.port}/hosts"
        with pytest.raises(urllib.error.HTTPError) as refused:
            get(url)
        assert refused.value.code == 503  # the chief's script keeps its last answer
        assert hosts.publish([("10.0.1.1", 1), ("10.0.2.0", 2)])
        assert get(url) == (200, "10.0.1.1:1\n10.0.2.0:2\n")
        assert not hosts.publish([("10.0.1.1", 1), ("10.0.2.0", 2)])
        with pytest.raises(urllib.error.HTTPError) as missing:
            get(f"http://127.0.0.1:{server.port}/other")
        assert missing.value.code == 404


def test_hosts_text_is_horovods_discovery_format():
    assert hosts_text([("a", 1), ("b", 4)]) == "a:1\nb:4\n"


def parsed(*flags):
    args = cli.build_parser().parse_args(["run", "--job-name=j", "--namespace=ns", "--image=img:1", *flags])
    return jobflags.settings_from_args(args, [])


@pytest.mark.parametrize("flags, flag", [
    (["--num-gpus=4", "--min-gpus=2"], "--min-gpus"),  # without --elastic
    (["--num-gpus=1", "--elastic"], "--elastic"),  # one GPU cannot shrink
    (["--num-gpus=4", "--elastic", "--min-gpus=5"], "--min-gpus"),
    (["--num-gpus=4", "--elastic", "--min-gpus=0"], "--min-gpus"),
    (["--num-gpus=4", "--elastic", "--elastic-timeout=soon"], "--elastic-timeout"),
])
def test_bad_elastic_flags_name_the_flag(flags, flag):
    with pytest.raises(errors.UsageError) as bad:
        parsed(*flags)
    assert bad.value.flag == flag


def test_elastic_flags_and_the_managers_address(monkeypatch):
    assert parsed("--num-gpus=4").min_gpus == 0
    monkeypatch.delenv(jobflags.ENV_POD_IP, raising=False)
    settings = parsed("--num-gpus=4", "--elastic")
    assert (settings.min_gpus, settings.elastic_timeout_s, settings.discovery_url) == (1, 600.0, "")
    monkeypatch.setenv(jobflags.ENV_POD_IP, "10.0.0.9")
    settings = parsed("--num-gpus=4", "--elastic", "--min-gpus=3", "--elastic-timeout=2m")
    assert (settings.min_gpus, settings.elastic_timeout_s, settings.discovery_url) == \
        (3, 120.0, "http://10.0.0.9:8470/hosts")


def test_the_elastic_chief_gets_horovods_bounds_and_where_to_ask():
    chief = manifests.chief_pod(SETTINGS, "n", 1, [("10.0.2.0", 3)])
    env = {e["name"]: e.get("value") for e in chief["spec"]["containers"][0]["env"]}
    assert {k: env[k] for k in ("DT_NUM_PROCS", "DT_MIN_PROCS", "DT_DISCOVERY_URL", "DT_ELASTIC_TIMEOUT")} == \
        {"DT_NUM_PROCS": "4", "DT_MIN_PROCS": "2", "DT_DISCOVERY_URL": "http://10.0.0.1:8470/hosts",
         "DT_ELASTIC_TIMEOUT": "600"}
    static = manifests.chief_pod(SETTINGS.replace(min_gpus=0), "n", 1, [("10.0.2.0", 3)])
    assert not any(e["name"].startswith(("DT_MIN", "DT_DISC", "DT_ELASTIC")) for e in static["spec"]["containers"][0]["env"])


def test_a_worker_not_ready_past_the_timeout_is_overdue_and_ready_again_is_forgotten():
    settings = SETTINGS.replace(worker_ready_timeout_s=60)
    since: dict[str, float] = {}
    pods = by_name(chief(), worker(0), worker(1, ready=False), worker(2, ready=False, deleting=True))
    assert elastic.overdue_workers(pods, settings, since, now=100.0) == []
    assert since == {"j-worker-1": 100.0}  # a terminating worker holds nothing to free
    assert elastic.overdue_workers(pods, settings, since, now=160.0) == []
    assert elastic.overdue_workers(pods, settings, since, now=160.5) == ["j-worker-1"]
    pods["j-worker-1"] = worker(1)
    assert elastic.overdue_workers(pods, settings, since, now=161.0) == [] and since == {}
    pods["j-worker-1"] = worker(1, ready=False)
    assert elastic.overdue_workers(pods, settings, since, now=200.0) == []  # a new wait starts now
