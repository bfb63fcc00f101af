"""Kueue's API in the version the cluster serves, against an API server on 127.0.0.1
(harness/apiserver.PathServer): v1beta2 where Kueue serves it (v0.15 on), v1beta1 where
it serves only that (v0.14 and before, or a CRD whose v1beta2 is not served), decided once
from discovery; the visibility API in the matching version."""

import pytest

from distributetrain.core import errors
from distributetrain.core.settings import JobSettings
from distributetrain.kube.connection import ApiTimeouts
from distributetrain.manager.placement import queueing
from harness.apiserver import PathServer, kube_at

TIMEOUTS = ApiTimeouts(connect_s=1.0, read_s=2.0, retry_deadline_s=2.0)
SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="reg/base:1", queue="team-a")
LOCAL_QUEUE = {"kind": "LocalQueue", "metadata": {"name": "team-a", "namespace": "ml"},
               "spec": {"clusterQueue": "gpus"}}
# A ClusterQueue as v1beta1 has it: cohort, not v1beta2's cohortName.
CLUSTER_QUEUE = {"kind": "ClusterQueue", "metadata": {"name": "gpus"}, "spec": {"cohort": "", "resourceGroups": [
    {"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
     "flavors": [{"name": "ml", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]}]}]}}
FLAVOR = {"kind": "ResourceFlavor", "metadata": {"name": "ml"}, "spec": {"nodeLabels": {"pool": "ml"}}}


def discovery(version: str, *resources: str) -> dict:
    """A group version's discovery document, as the API server serves a CRD's."""
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"kueue.x-k8s.io/{version}",
            "resources": [{"name": name, "namespaced": name == "localqueues", "kind": name.title()}
                          for name in resources]}


def kueue_serving(*versions: str, local_queues_in: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Kueue's objects in each of ``versions`` (LocalQueues only in ``local_queues_in``, if given)."""
    answers = {}
    for version in versions:
        kinds = ("clusterqueues", "resourceflavors", "workloads")
        if local_queues_in is None or version in local_queues_in:
            kinds = ("localqueues", *kinds)
            answers[f"/apis/kueue.x-k8s.io/{version}/namespaces/ml/localqueues/team-a"] = LOCAL_QUEUE
        answers[f"/apis/kueue.x-k8s.io/{version}"] = discovery(version, *kinds)
        answers[f"/apis/kueue.x-k8s.io/{version}/clusterqueues/gpus"] = CLUSTER_QUEUE
        answers[f"/apis/kueue.x-k8s.io/{version}/resourceflavors/ml"] = FLAVOR
        answers[f"/apis/visibility.kueue.x-k8s.io/{version}/namespaces/ml/localqueues/team-a/pendingworkloads"] = {
            "items": [{"metadata": {"name": f"read-in-{version}"}, "positionInLocalQueue": 0}]}
    return answers


@pytest.mark.parametrize("served, local_queues_in, read_in", [
    (("v1beta2", "v1beta1"), None, "v1beta2"),  # Kueue v0.15 to v0.19
    (("v1beta2",), None, "v1beta2"),  # Kueue from v0.20
    (("v1beta1",), None, "v1beta1"),  # Kueue up to v0.14
    (("v1beta2", "v1beta1"), ("v1beta1",), "v1beta1"),  # a LocalQueue CRD whose v1beta2 is not served
])
def test_kueue_s_objects_are_read_in_the_newest_version_that_serves_local_queues(served, local_queues_in, read_in):
    with PathServer(kueue_serving(*served, local_queues_in=local_queues_in)) as server:
        kube = kube_at(server.url, TIMEOUTS)
        flavors = queueing.check_queue(kube, SETTINGS)
        pending = kube.pending_workloads("ml", "team-a")
        with pytest.raises(errors.UsageError, match="requested 3 GPUs but queue team-a's ClusterQueue gpus admits 2"):
            queueing.check_queue(kube, SETTINGS.replace(num_gpus=3))
    assert [str(rule) for rule in flavors] == ["pool=ml"]
    assert pending == [{"metadata": {"name": f"read-in-{read_in}"}, "positionInLocalQueue": 0}]
    reads = [path for path in server.paths if path.count("/") > 3]
    assert reads and all(f"/{read_in}/" in path for path in reads), reads
    # Decided once: discovery asked for each version at most once, whatever was read after.
    discoveries = [path for path in server.paths if path.count("/") == 3]
    assert len(discoveries) == len(set(discoveries)) <= 2, discoveries


def test_without_kueue_a_queue_is_bad_input_saying_kueue_is_not_there():
    with PathServer({}) as server:
        kube = kube_at(server.url, TIMEOUTS)
        with pytest.raises(errors.UsageError, match="the cluster serves no Kueue LocalQueues"):
            queueing.check_queue(kube, SETTINGS)
        with pytest.raises(errors.NotFound):
            kube.pending_workloads("ml", "team-a")
        assert kube.read("LocalQueue", "ml", "team-a") is None
