"""CLI: flags become settings; every bad input is one line naming the flag, exit 2."""

import pytest

from distributetrain.cli import main as cli, jobflags
from distributetrain.core import errors
from distributetrain.core.pods import networkpolicy

BASE = ["render", "--nodes", "gpu-a=5,gpu-b=3,gpu-c=2", "--image", "reg/base:1", "--job-name", "demo"]


def run(capsys, argv):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "extra,flag",
    [
        (["--num-gpus", "0"], "--num-gpus"),
        (["--num-gpus", "-3"], "--num-gpus"),
        (["--num-gpus", "abc"], "--num-gpus"),
        (["--num-gpus", "2.5"], "--num-gpus"),
        (["--num-gpus", "11"], "--num-gpus"),
        (["--num-gpus", "2", "--port", "70000"], "--port"),
        (["--num-gpus", "2", "--port", "0"], "--port"),
        (["--num-gpus", "2", "--port", "22", "--host-network", "true"], "--port"),
        (["--num-gpus", "2", "--port", "80"], "--port"),  # sshd runs as a non-root user
        (["--num-gpus", "2", "--mesh-injection", "maybe"], "--mesh-injection"),
        (["--num-gpus", "2", "--host-network", "maybe"], "--host-network"),
        (["--num-gpus", "2", "--image", "Bad Image"], "--image"),
        (["--num-gpus", "2", "--image", "reg/base:"], "--image"),
        (["--num-gpus", "2", "--job-name", "Not_DNS"], "--job-name"),
        (["--num-gpus", "2", "--job-name", "x" * 51], "--job-name"),
        (["--num-gpus", "2", "--namespace", "Bad.NS"], "--namespace"),
        (["--num-gpus", "2", "--gpu-resource", "gpu"], "--gpu-resource"),
        (["--num-gpus", "2", "--env", "1BAD=x"], "--env"),
        (["--num-gpus", "2", "--orphan-timeout", "0s"], "--orphan-timeout"),
        (["--num-gpus", "2", "--orphan-timeout", "soon"], "--orphan-timeout"),
        (["--num-gpus", "2", "--env-from-secret", "Bad_Secret"], "--env-from-secret"),
        (["--num-gpus", "2", "--env-from-secret", "creds=x"], "--env-from-secret"),
        (["--num-gpus", "2", "--env-from-secret", ""], "--env-from-secret"),
        (["--num-gpus", "2", "--queue", "Team_A"], "--queue"),
        (["--num-gpus", "2", "--queue", "team-a", "--elastic"], "--queue"),
        (["--num-gpus", "2", "--priority-class", "high"], "--priority-class"),
        (["--num-gpus", "2", "--queue", "team-a", "--priority-class", "High_1"], "--priority-class"),
        (["--num-gpus", "2", "--env-from-secret", "a" * 254], "--env-from-secret"),
        (["--num-gpus", "2", "--pvc", "claim"], "--pvc"),
        (["--num-gpus", "2", "--pvc", "claim:relative"], "--pvc"),
        (["--num-gpus", "2", "--toleration", "k=v:Sometimes"], "--toleration"),
        (["--num-gpus", "2", "--wait-for-gpus", "soon"], "--wait-for-gpus"),
        (["--num-gpus", "2", "--filename", "train.py"], "--filename"),
        (["--num-gpus", "2", "--cpu-per-gpu", "0"], "--cpu-per-gpu"),
        (["--num-gpus", "2", "--cpu-per-gpu", "-1"], "--cpu-per-gpu"),
        (["--num-gpus", "2", "--cpu-per-gpu", "four"], "--cpu-per-gpu"),
        (["--num-gpus", "2", "--cpu-per-gpu", "0.0005"], "--cpu-per-gpu"),
        (["--num-gpus", "2", "--memory-per-gpu", "16"], "--memory-per-gpu"),
        (["--num-gpus", "2", "--memory-per-gpu", "100m"], "--memory-per-gpu"),
        (["--num-gpus", "2", "--memory-per-gpu", "16GB"], "--memory-per-gpu"),
        (["--num-gpus", "2", "--shm-size", "8g"], "--shm-size"),
        (["--num-gpus", "2", "--shm-size", "1Mi"], "--shm-size"),
        (["--num-gpus", "2", "--pvc", "scratch:/dev/shm"], "--pvc"),
        (["--num-gpus", "2", "--max-restarts", "-1"], "--max-restarts"),
        (["--num-gpus", "2", "--max-restarts", "twice"], "--max-restarts"),
        (["--num-gpus", "2", "--frobnicate"], "--frobnicate"),
        (["--num-gpus", "2", "--topology", "rack,,block"], "--topology"),
        (["--num-gpus", "2", "--topology", "example.com/rack!!"], "--topology"),
        (["--num-gpus", "2", "--image-pull-secret", "Reg_Cred"], "--image-pull-secret"),
        (["--num-gpus", "2", "--image-pull-secret", ""], "--image-pull-secret"),
        (["--num-gpus", "2", "--runtime-class", "NVIDIA"], "--runtime-class"),
        (["--num-gpus", "2", "--pod-priority-class", "High_1"], "--pod-priority-class"),
        (["--num-gpus", "2", "--termination-grace-period", "1.5s"], "--termination-grace-period"),
        (["--num-gpus", "2", "--termination-grace-period", "-10s"], "--termination-grace-period"),
        (["--num-gpus", "2", "--node-lost-toleration", "soon"], "--node-lost-toleration"),
        (["--num-gpus", "2", "--node-lost-toleration", "500ms"], "--node-lost-toleration"),
        (["--num-gpus", "2", "--cpu-limit-per-gpu", "1"], "--cpu-limit-per-gpu"),  # below --cpu-per-gpu's 2
        (["--num-gpus", "2", "--cpu-limit-per-gpu", "four"], "--cpu-limit-per-gpu"),
        (["--num-gpus", "2", "--memory-limit-per-gpu", "4Gi"], "--memory-limit-per-gpu"),  # below 8Gi
        (["--num-gpus", "2", "--memory-limit-per-gpu", "16"], "--memory-limit-per-gpu"),
        ([], "--num-gpus"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(capsys, extra, flag):
    code, out, err = run(capsys, BASE + extra)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"distributetrain: error: {flag}")


def test_render_prints_every_object(capsys):
    code, out, _ = run(capsys, ["render", "--num-gpus", "6", "--nodes", "gpu-a=5,gpu-b=3,gpu-c=2",
                                "--image", "reg/base:1", "--job-name", "demo"])
    import yaml

    docs = list(yaml.safe_load_all(out))
    assert code == 0
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Secret", "demo-ssh"), ("NetworkPolicy", "demo-pods"), ("Pod", "demo-worker-0"), ("Pod", "demo-chief")]
    assert docs[2]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "5", "memory": "40Gi"}
    assert docs[3]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1", "memory": "8Gi"}
    assert "PRIVATE KEY" not in out


def test_render_dra_nodes_prints_the_claim_templates_their_pods_name(capsys):
    code, out, _ = run(capsys, ["render", "--num-gpus", "6", "--nodes", "gpu-a=5,dra-b=3", "--dra-nodes", "dra-b",
                                "--device-class", "gpu.example.com", "--image", "reg/base:1", "--job-name", "demo"])
    import yaml

    docs = list(yaml.safe_load_all(out))
    assert code == 0
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Secret", "demo-ssh"), ("NetworkPolicy", "demo-pods"), ("ResourceClaimTemplate", "demo-gpus-1"),
        ("Pod", "demo-worker-0"), ("Pod", "demo-chief")]
    assert docs[2]["spec"]["spec"]["devices"]["requests"] == [
        {"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com", "count": 1}}]
    assert docs[3]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "5", "memory": "40Gi"}
    chief = docs[4]["spec"]
    assert chief["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "demo-gpus-1"}]
    assert chief["containers"][0]["resources"]["limits"] == {"memory": "8Gi"}
    assert chief["containers"][0]["resources"]["claims"] == [{"name": "gpus"}]


def test_render_dra_nodes_need_a_device_class(capsys):
    code, out, err = run(capsys, ["render", "--num-gpus", "2", "--nodes", "dra-b=3", "--dra-nodes", "dra-b",
                                  "--image", "reg/base:1", "--job-name", "demo"])
    assert (code, out) == (2, "")
    assert err.startswith("distributetrain: error: --dra-nodes: needs --device-class")


def test_settings_from_flags_and_downward_api_env(monkeypatch):
    monkeypatch.setenv(jobflags.ENV_POD_NAME, "job-7")
    monkeypatch.setenv(jobflags.ENV_POD_NAMESPACE, "team")
    monkeypatch.setenv(jobflags.ENV_POD_UID, "uid-7")
    args = cli.build_parser().parse_args(
        ["pre-training", "--num-gpus", "6", "--image", "img:1", "--host-network", "true", "--env", "A=b=c",
         "--pvc", "data:/train:ro", "--node-selector", "pool=a,zone=z", "--wait-for-gpus", "5m",
         "--active-deadline", "2h", "--toleration", "gpu:NoSchedule", "--env-from-secret", "s3-creds",
         "--env-from-secret", "wandb.api"])
    settings = jobflags.settings_from_args(args, ["--epochs", "2"])
    assert (settings.job_name, settings.namespace, settings.owner_uid) == ("job-7", "team", "uid-7")
    assert settings.host_network and settings.port == 12345
    assert settings.env == (("A", "b=c"),)
    assert settings.env_from_secrets == ("s3-creds", "wandb.api")
    assert settings.pvcs[0].claim == "data" and settings.pvcs[0].read_only
    assert settings.node_selector == (("pool", "a"), ("zone", "z"))
    assert settings.wait_for_gpus_s == 300 and settings.active_deadline_s == 7200
    assert settings.tolerations == ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},)
    assert settings.script_args == ("--epochs", "2")


def test_quantity_errors_show_the_valid_form(capsys):
    _, _, err = run(capsys, BASE + ["--num-gpus", "2", "--memory-per-gpu", "16"])
    assert err == ("distributetrain: error: --memory-per-gpu: must be a memory quantity like 16Gi or 512Mi "
                   "(whole bytes, at least 64Mi), got '16'\n")


def test_cpu_and_memory_per_gpu_defaults_and_flags(monkeypatch):
    monkeypatch.setenv(jobflags.ENV_POD_NAME, "job-7")
    base = ["run", "--num-gpus", "2", "--image", "i"]
    defaults = jobflags.settings_from_args(cli.build_parser().parse_args(base), [])
    assert (defaults.cpu_per_gpu_m, defaults.memory_per_gpu_bytes) == (2000, 8 * 2**30)
    custom = jobflags.settings_from_args(
        cli.build_parser().parse_args([*base, "--cpu-per-gpu", "500m", "--memory-per-gpu", "1.5Gi"]), [])
    assert (custom.cpu_per_gpu_m, custom.memory_per_gpu_bytes) == (500, 1536 * 2**20)
    assert defaults.shm_size_bytes is None
    shm = jobflags.settings_from_args(cli.build_parser().parse_args([*base, "--shm-size", "2Gi"]), [])
    assert shm.shm_size_bytes == 2 * 2**30


def test_job_name_required_outside_a_pod(monkeypatch):
    monkeypatch.delenv(jobflags.ENV_POD_NAME, raising=False)
    args = cli.build_parser().parse_args(["run", "--num-gpus", "1", "--image", "i"])
    with pytest.raises(errors.UsageError) as raised:
        jobflags.settings_from_args(args, [])
    assert raised.value.flag == "--job-name"


def test_script_args_after_double_dash_are_untouched():
    assert jobflags.split_script_args(["run", "--num-gpus", "1", "--", "--port", "x"]) == (
        ["run", "--num-gpus", "1"], ["--port", "x"])


def test_render_queue_prints_the_pods_the_manager_queues(capsys):
    """Whole objects: exactly what the manager creates for Kueue (podgroup.queued_attempt)."""
    from distributetrain.cli import render
    from distributetrain.core.pods import manifests, podgroup
    import yaml

    code, out, _ = run(capsys, ["render", "--num-gpus", "6", "--nodes", "gpu-a=5,gpu-b=3,gpu-c=2",
                                "--image", "reg/base:1", "--job-name", "demo", "--queue", "team-a",
                                "--priority-class", "high"])
    docs = list(yaml.safe_load_all(out))
    assert code == 0
    group = "demo-r0-<random per group>"
    settings = jobflags.settings_from_args(cli.build_parser().parse_args(
        [*BASE, "--num-gpus", "6", "--queue", "team-a", "--priority-class", "high"]), [])
    settings = settings.replace(discovery_url="http://<manager pod IP>:8470/hosts")
    secret, *pods = manifests.job_objects(settings, [(None, 5), (None, 1)], render.PLACEHOLDER_KEYS)
    queued = {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/pod-group-name": group,
              "kueue.x-k8s.io/priority-class": "high"}
    counted = {"kueue.x-k8s.io/pod-group-total-count": "2", "kueue.x-k8s.io/retriable-in-group": "false"}
    expected = [secret, *networkpolicy.job_policies(settings)] + [
        {**pod, "metadata": {**pod["metadata"], "labels": pod["metadata"]["labels"] | queued,
                             "annotations": pod["metadata"]["annotations"] | counted},
         "spec": {**pod["spec"], "schedulingGates": [{"name": "distributetrain.io/placement"}]}}
        for pod in pods]
    assert docs == expected
    secret, *pods = podgroup.queued_attempt(settings, [5, 1], render.PLACEHOLDER_KEYS, 0, group)
    assert docs == [secret, networkpolicy.pods_policy(settings), *pods]


def test_render_scale_up_prints_the_pods_for_new_nodes(capsys):
    """What the nodes given cannot hold, on pods for nodes the cluster adds, as the manager creates them."""
    from distributetrain.cli import render
    from distributetrain.core.pods import manifests
    import yaml

    flags = ["--num-gpus", "12", "--nodes", "gpu-a=4", "--image", "reg/base:1", "--job-name", "demo",
             "--scale-up-node-gpus", "8", "--wait-for-gpus", "5m"]
    code, out, _ = run(capsys, ["render", *flags])
    assert code == 0
    settings = jobflags.settings_from_args(cli.build_parser().parse_args(["render", *flags]), [])
    settings = settings.replace(discovery_url="http://<manager pod IP>:8470/hosts")
    secret, *pods = manifests.job_objects(settings, [("(new node)", 8), ("gpu-a", 4)], render.PLACEHOLDER_KEYS)
    assert list(yaml.safe_load_all(out)) == [secret, networkpolicy.pods_policy(settings), *pods]


def test_render_elastic_prints_the_worker_beside_the_chief_the_manager_creates(capsys):
    """An elastic job keeps a worker beside its chief (``ElasticJob.plan``): all 4 GPUs of
    one node become a 3-GPU worker and a 1-GPU chief, in render as in the manager."""
    from distributetrain.cli import render
    from distributetrain.core.pods import manifests
    import yaml

    flags = ["--num-gpus", "4", "--nodes", "gpu-a=4", "--image", "reg/base:1", "--job-name", "demo", "--elastic"]
    code, out, _ = run(capsys, ["render", *flags])
    assert code == 0
    settings = jobflags.settings_from_args(cli.build_parser().parse_args(["render", *flags]), [])
    settings = settings.replace(discovery_url="http://<manager pod IP>:8470/hosts")
    secret, *pods = manifests.job_objects(settings, [("gpu-a", 3), ("gpu-a", 1)], render.PLACEHOLDER_KEYS)
    assert list(yaml.safe_load_all(out)) == [secret, networkpolicy.pods_policy(settings), *pods]
