"""A chief whose pod carries a service mesh's proxy, as the kubelet really reports it: the
training container terminates while a classic sidecar runs on (the pod stays Running for
ever) or before the kubelet stops a native one (an init container with restartPolicy
Always). The manager's readings (``podstate``) end the chief with its training
container's exit code either way, and its teardown, run here against the API server,
leaves nothing that holds GPUs: a chief kept for its logs only once it ends on its own."""

import pytest

from distributetrain.core import names, podstate
from distributetrain.core.settings import JobSettings
from distributetrain.kube.client import Kube
from distributetrain.manager.teardown import tear_down
from jobharness import node_pool

pytestmark = pytest.mark.cluster

IMAGE = "distributetrain/base:0.1.0"  # pre-pulled on every node
TRAINING_EXIT_CODE = 3
FINISH_TIMEOUT_S = 120


def chief(settings: JobSettings, name: str, node: str, native: bool) -> dict:
    proxy = {"name": "istio-proxy", "image": IMAGE, "command": ["sleep", "infinity"]}
    spec = {
        "nodeName": node,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": names.ROLE_CHIEF, "image": IMAGE,
                        "command": ["sh", "-c", f"sleep 2; exit {TRAINING_EXIT_CODE}"]}],
    }
    if native:
        spec["initContainers"] = [proxy | {"restartPolicy": "Always"}]
    else:
        spec["containers"].append(proxy)
    labels = names.job_labels(settings.job_name, names.ROLE_CHIEF, settings.owner_uid)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


@pytest.mark.parametrize("native", [False, True], ids=["classic-sidecar", "native-sidecar"])
def test_a_chief_with_a_sidecar_ends_with_its_training_container(cluster, api_client, namespace, jobs, native):
    settings = JobSettings(job_name="meshed", namespace=namespace, num_gpus=1, image=IMAGE, owner_uid="uid-meshed")
    with node_pool(cluster, {"a": 1}) as pool:
        jobs.core.create_namespaced_pod(namespace, chief(settings, "meshed-chief", pool.node("a"), native))
        ended = jobs.wait_for("meshed-chief", podstate.is_finished, FINISH_TIMEOUT_S)
        assert podstate.exit_code(ended) == TRAINING_EXIT_CODE, ended["status"]
        if native:
            # The kubelet stops the native proxy once the training container is done.
            assert podstate.ends_on_its_own(ended)
            ended = jobs.wait_for("meshed-chief", podstate.has_ended, FINISH_TIMEOUT_S)
            assert podstate.exit_code(ended) == TRAINING_EXIT_CODE
        else:
            assert podstate.phase(ended) == "Running" and not podstate.ends_on_its_own(ended), ended["status"]

        deleted = tear_down(Kube(api_client), settings, keep_chief=True)
        # A classic proxy would run, and hold the chief's GPUs, for ever: the chief goes.
        assert deleted == ([] if native else ["pod/meshed-chief"])
        if not native:
            jobs.wait_gone(["meshed-chief"])
