"""End to end in a namespace that enforces PodSecurity `restricted` (latest): the manager
pod as users apply it (manager.yaml) is admitted, the demo's job trains there under
exactly rbac/ and exits 0 with nothing left, --host-network is refused up front, and an
image without the job's user fails in one line.
A root pod refused there first proves that the namespace really enforces."""

import json

import pytest
import yaml
from kubernetes import client

from distributetrain.core import exitcodes
from jobharness import REPO, node_pool, script_volume

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

# scripts/demo.py's job: 3 GPUs over 2 + 1, sized for this machine's kubelets, checkpoints
# on a volume (which the job's non-root user must be able to write); fewer samples.
DEMO_ARGS = ("--num-gpus=3", "--image=distributetrain/base:0.1.0", "--cpu-per-gpu=250m", "--memory-per-gpu=2Gi",
             "--worker-ready-timeout=90s", "--delete-chief")
DEMO_TRAIN_ARGS = ("--epochs=4", "--samples=1536", "--checkpoint-dir=/train/checkpoints")
IMAGE_WITHOUT_JOB_USER = "python:3.11.10-slim-bookworm"


def test_the_namespace_refuses_a_root_pod(api_client, restricted):
    root_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"},
                "spec": {"containers": [{"name": "c", "image": "distributetrain/base:0.1.0"}]}}
    with pytest.raises(client.ApiException) as refused:
        client.CoreV1Api(api_client).create_namespaced_pod(restricted, root_pod, dry_run="All")
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted:latest"' in json.loads(refused.value.body)["message"]


def test_manager_yaml_is_admitted(cluster, restricted, rbac):
    manager = yaml.safe_load((REPO / "manager.yaml").read_text())
    manager["metadata"]["namespace"] = restricted
    applied = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(manager))
    assert applied.returncode == 0, applied.stderr
    assert "distributetrain-manager created (server dry run)" in applied.stdout
    assert "Warning" not in applied.stderr


def test_the_demo_job_trains_and_leaves_nothing(cluster, api_client, restricted, jobs, tmp_path):
    with node_pool(cluster, {"a": 2, "b": 1}) as pool, script_volume(api_client, restricted, {}, tmp_path) as claim:
        jobs.submit("demo", [*DEMO_ARGS, f"--node-selector={pool.selector}", f"--pvc={claim}:/train",
                             "--", *DEMO_TRAIN_ARGS])
        assert jobs.exit_code("demo", timeout_s=300) == 0, jobs.report("demo")
        jobs.wait_gone(["demo-worker-0", "demo-chief"])
        assert set(jobs.pods()) == {"demo"}
        assert jobs.secrets("demo-") == []
        saved = sorted(p.name for p in (tmp_path / "volume" / "checkpoints").iterdir())
        assert any(name.startswith("checkpoint-0004") for name in saved), saved


def test_host_network_is_refused_up_front_naming_the_level(cluster, restricted, jobs):
    with node_pool(cluster, {"a": 1}) as pool:
        jobs.submit("hostnet", [*DEMO_ARGS, f"--node-selector={pool.selector}", "--host-network=true",
                                "--port=23457"])
        assert jobs.exit_code("hostnet", timeout_s=120) == 2
        logs = jobs.logs("hostnet")
        assert "--host-network: namespace" in logs and "'restricted'" in logs, logs
        assert set(jobs.pods()) == {"hostnet"} and jobs.secrets("hostnet-") == []


def test_an_image_without_the_job_user_fails_in_one_line_not_a_hang(cluster, restricted, jobs):
    # The python stand-in base: no uid 1000 in its /etc/passwd, no nss_wrapper, no sshd.
    with node_pool(cluster, {"a": 1}) as pool:
        jobs.submit("nouser", ["--num-gpus=1", f"--image={IMAGE_WITHOUT_JOB_USER}", "--cpu-per-gpu=250m",
                               "--memory-per-gpu=2Gi", f"--node-selector={pool.selector}", "--worker-ready-timeout=90s"])
        assert jobs.exit_code("nouser", timeout_s=120) == exitcodes.IMAGE_UNFIT, jobs.report("nouser")
        (chief,) = jobs.pod("nouser-chief")["status"]["containerStatuses"]
        message = chief["state"]["terminated"]["message"]
        assert message.strip() == ("distributetrain: the image has no user with uid 1000 and no nss_wrapper to give "
                                   "it one (install libnss-wrapper, as base_image/ does, or add an /etc/passwd entry): "
                                   "ssh and sshd cannot run without one"), message
