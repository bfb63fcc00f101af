"""A namespace where Kueue queues every pod, queue name or not (manageJobsWithoutQueueName,
as a platform team that makes every workload go through a queue configures it): the
manager itself runs, going through the job's queue without holding quota, and the job is
admitted as one workload, its queue read in v1beta1 (as Kueue v0.14 and earlier serve
it); a job submitted without --queue is refused, naming it."""

import subprocess
import sys

import pytest
from kubernetes import client

from distributetrain.core import names
from distributetrain.core.pods import podgroup
from jobharness import LOCAL_MACHINE_FLAGS, REPO, SCRIPTS, job_args, node_pool, script_volume
from kueueharness import gpu_queue, served_in_v1beta1_only, workloads

# Kueue is started per module, configured its own way: its modules share a worker (conftest.py).
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("kueue")]

EVERY_POD = {"distributetrain.test/kueue": "every-pod"}
CLI_TIMEOUT_S = 60.0
JOB_TIMEOUT_S = 600.0


@pytest.fixture(scope="module")
def kueue_queues_every_pod(cluster):
    cluster.stop_kueue()  # another module's Kueue, configured otherwise
    cluster.start_kueue(every_pod_of=EVERY_POD)
    try:
        yield cluster
    finally:
        cluster.stop_kueue()


@pytest.fixture
def managed_namespace(kueue_queues_every_pod, api_client, namespace, rbac):
    client.CoreV1Api(api_client).patch_namespace(namespace, {"metadata": {"labels": EVERY_POD}})
    return namespace


def submit(cluster, namespace, *args):
    """`distributetrain submit` with the user's (admin) kubeconfig."""
    return subprocess.run([sys.executable, "-m", "distributetrain", "submit", "--kubeconfig", str(cluster.kubeconfig),
                           "--namespace", namespace, *args], capture_output=True, text=True, timeout=CLI_TIMEOUT_S, cwd=REPO)


def test_the_manager_runs_through_the_queue_asking_no_quota_and_the_job_is_one_workload_on_kueue_v1beta1(
        kueue_queues_every_pod, api_client, managed_namespace, jobs, tmp_path):
    """With Kueue's queues and flavors served in v1beta1 only, as Kueue v0.14 and earlier
    serve them: the manager reads them in v1beta1."""
    namespace = managed_namespace
    with node_pool(kueue_queues_every_pod, {"a": 2, "b": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim, \
            gpu_queue(api_client, namespace, 3) as queue, served_in_v1beta1_only(api_client):
        done = submit(kueue_queues_every_pod, namespace, "--name", "everypod", "--queue", queue.name,
                      "--manager-node-selector", pool.selector, *LOCAL_MACHINE_FLAGS,
                      *job_args(pool, claim, 3, script_args=("0",)))
        assert done.returncode == 0, done.stderr
        assert jobs.exit_code("everypod", JOB_TIMEOUT_S) == 0, jobs.report("everypod")
        manager = jobs.pod("everypod")
        assert manager["metadata"]["labels"][podgroup.QUEUE_LABEL] == queue.name
        assert manager["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "0", "memory": "0"}
        # Two workloads: the manager's, alone, and the job's attempt, its pods all together.
        ours = sorted(w["metadata"]["name"] for w in workloads(api_client, namespace))
        job_workloads = [w for w in ours if w.startswith("everypod-r0-")]
        assert len(job_workloads) == 1 and len(ours) == 2, ours
        plan = (manager["metadata"].get("annotations") or {})[names.ANNOTATION_PLAN]
        assert plan == f"{pool.node('a')}=2,{pool.node('b')}=1"


def test_a_job_without_a_queue_is_refused_naming_the_flag(kueue_queues_every_pod, api_client, managed_namespace):
    done = submit(kueue_queues_every_pod, managed_namespace, "--name", "noqueue", "--num-gpus", "1",
                  "--image", "distributetrain/base:0.1.0")
    assert done.returncode == 2
    assert done.stderr == (f"distributetrain: error: --queue: Kueue queues every pod in namespace "
                           f"{managed_namespace!r}: name the job's LocalQueue, --queue=NAME\n")
    assert client.CoreV1Api(api_client).list_namespaced_pod(managed_namespace).items == []
