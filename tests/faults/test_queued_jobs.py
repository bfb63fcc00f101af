"""Jobs through a Kueue queue (--queue) on the local cluster, the manager under exactly
rbac/ plus rbac/kueue/: quota never exceeded and queue order kept with several jobs at
once, one workload for a job split over a flavor's two tainted nodes (no placement Lease
taken while Kueue holds it back, one once admitted), a job under Kueue's
Topology Aware Scheduling, and preemption (restart from the checkpoint, or exit 72)."""

import json
import subprocess
import sys
import threading
import time

import pytest
from kubernetes import client

from distributetrain.core import names
from distributetrain.core.pods import podgroup
from distributetrain.core.placement import podstate
from jobharness import HOLD_UNTIL_RELEASED, SCRIPTS, TEST_NODE_LABEL, job_args, node_pool, release_ranks, script_volume
from kueueharness import gpu_queue, gpus_reserved, is_admitted, priority_classes, topology, workloads
from harness.polling import poll_until

# Kueue is started per module, configured its own way: its modules share a worker (conftest.py).
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("kueue")]

SAMPLE_S = 0.5
QUEUED_TIMEOUT_S = 120.0
POSITION_TIMEOUT_S = 60.0  # the manager reads positions every 10 s
CLI_TIMEOUT_S = 60.0
JOB_TIMEOUT_S = 600.0
RACK = "network.topology.kubernetes.io/rack"
# Rank 0 counts the steps done in a file of the volume (the job's checkpoint) and goes on
# from it; every rank then holds until the test releases it.
CHECKPOINTED = HOLD_UNTIL_RELEASED + """\
import os, sys
step_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), sys.argv[1] + ".step")
if os.environ.get("HOROVOD_RANK") == "0":
    start = int(open(step_file).read()) if os.path.exists(step_file) else 0
    print(f"start at step {start}", flush=True)
    with open(step_file, "w") as out:
        out.write(str(start + 1))
hold_until_released()
"""


def phase(pod: dict) -> str:
    return (pod["metadata"].get("annotations") or {}).get(names.ANNOTATION_PHASE, "")


def position(pod: dict) -> str:
    return (pod["metadata"].get("annotations") or {}).get(names.ANNOTATION_QUEUE_POSITION, "")


def placement_leases_taken(manager_log: str) -> int:
    """How often the manager took the placement Lease (``kube/lock``'s line)."""
    return manager_log.count(f"took placement lock [default/{names.LOCK_LEASE_NAME}]")


def job_pods_holding_gpus(core, namespace) -> list[dict]:
    """The job pods bound to a node and not finished: what holds GPUs on nodes."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"{names.LABEL_APP}={names.APP}",
                                    _preload_content=False)
    return [p for p in json.loads(pods.data)["items"] if podstate.is_training_pod(p)
            and p["spec"].get("nodeName") and not podstate.is_finished(p)]


class Sampler:
    """Samples, every half second while jobs run: the GPUs the ClusterQueue has admitted,
    the GPUs bound job pods hold on each node, and when each workload was first seen
    admitted."""

    def __init__(self, api_client, namespace: str, cluster_queue: str):
        self.api_client, self.namespace, self.cluster_queue = api_client, namespace, cluster_queue
        self.core = client.CoreV1Api(api_client)
        self.reserved: list[int] = []
        self.bound: list[dict[str, int]] = []
        self.created: dict[str, str] = {}  # workload: creationTimestamp
        self.admitted_at: dict[str, int] = {}  # workload: index of the first sample it was admitted in
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            index = len(self.reserved)
            self.reserved.append(gpus_reserved(self.api_client, self.cluster_queue))
            per_node: dict[str, int] = {}
            for pod in job_pods_holding_gpus(self.core, self.namespace):
                per_node[pod["spec"]["nodeName"]] = per_node.get(pod["spec"]["nodeName"], 0) + podstate.gpus_of(pod)
            self.bound.append(per_node)
            for workload in workloads(self.api_client, self.namespace):
                name = workload["metadata"]["name"]
                self.created.setdefault(name, workload["metadata"]["creationTimestamp"])
                if is_admitted(workload):
                    self.admitted_at.setdefault(name, index)
            self._stop.wait(SAMPLE_S)


def test_jobs_at_once_through_a_4_gpu_queue_never_exceed_it_and_keep_its_order(kueue_running, api_client,
                                                                               namespace, jobs, tmp_path):
    sizes = {"q3": 3, "q2a": 2, "q2b": 2, "q1": 1, "q4": 4}
    with node_pool(kueue_running, {"a": 4, "b": 2}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim, \
            gpu_queue(api_client, namespace, 4) as queue, \
            Sampler(api_client, namespace, queue.cluster_queue) as sampler:
        capacity = {pool.node("a"): 4, pool.node("b"): 2}
        for name, gpus in sizes.items():
            jobs.submit(name, job_args(pool, claim, gpus, f"--queue={queue.name}", script_args=("0", "4")))
        codes = {name: jobs.exit_code(name, JOB_TIMEOUT_S) for name in sizes}
    assert codes == dict.fromkeys(sizes, 0), {name: jobs.log_tail(name) for name, code in codes.items() if code}
    assert max(sampler.reserved) <= 4, sampler.reserved
    for per_node in sampler.bound:
        assert sum(per_node.values()) <= 4, sampler.bound
        assert all(gpus <= capacity[node] for node, gpus in per_node.items()), per_node
    # Each job was one workload, and Kueue admitted them in the order they were created
    # (StrictFIFO; creation times have a resolution of one second).
    ours = {w: next(job for job in sizes if w.startswith(f"{job}-r0-")) for w in sampler.created}
    assert sorted(ours.values()) == sorted(sizes), sampler.created
    by_creation = sorted(sampler.created, key=sampler.created.get)
    for earlier, later in zip(by_creation, by_creation[1:]):
        if sampler.created[earlier] < sampler.created[later]:
            assert sampler.admitted_at[earlier] <= sampler.admitted_at[later], (sampler.created, sampler.admitted_at)


def flavored(core, pool, logical_nodes) -> dict:
    """``logical_nodes`` of ``pool`` labelled and tainted as a platform team dedicates a
    node pool to a ResourceFlavor; returns the flavor's spec: those labels, that taint
    tolerated (Kueue adds both to the pods it admits into the flavor)."""
    key = "distributetrain.test/flavor"
    for logical in logical_nodes:
        core.patch_node(pool.node(logical), {"metadata": {"labels": {key: pool.prefix}}, "spec": {"taints": [
            {"key": key, "value": pool.prefix, "effect": "NoSchedule"}]}})
    return {"nodeLabels": {key: pool.prefix},
            "tolerations": [{"key": key, "operator": "Equal", "value": pool.prefix, "effect": "NoSchedule"}]}


def test_a_job_split_over_a_flavor_s_two_nodes_is_one_workload_that_starts_only_when_all_of_it_fits(
        kueue_running, api_client, namespace, jobs, tmp_path):
    """The flavor's nodes a and b are labelled for it and tainted; c, untainted and free,
    is not the flavor's: the job's pods are planned and placed on a and b, where Kueue's
    node selector and tolerations let them run."""
    core = client.CoreV1Api(api_client)
    with node_pool(kueue_running, {"a": 2, "b": 1, "c": 3}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim, \
            gpu_queue(api_client, namespace, 3, flavor_spec=flavored(core, pool, ("a", "b"))) as queue:
        jobs.submit("holder", job_args(pool, claim, 1, f"--queue={queue.name}", script_args=("0", "hold")))
        jobs.wait_for("holder", lambda p: phase(p) == "Training", QUEUED_TIMEOUT_S)
        # 2 GPUs free on a, 3 wanted: shares 2 and 1 over both nodes; 2 of 3 GPUs of quota left.
        jobs.submit("split", job_args(pool, claim, 3, f"--queue={queue.name}", script_args=("0",)))
        jobs.wait_for("split", lambda p: phase(p) == "Queued", QUEUED_TIMEOUT_S)
        time.sleep(3)  # Kueue has had its chance to admit it, and must not have
        # Held back, the job waits on its watch of its pods: the placement Lease is not taken.
        assert placement_leases_taken(jobs.logs("split")) == 0
        split_pods = {name: pod for name, pod in jobs.pods().items() if name.startswith("split-")}
        assert sorted(split_pods) == ["split-chief", "split-worker-0"]
        assert all(not p["spec"].get("nodeName") and podgroup.kueue_gated(p) for p in split_pods.values()), split_pods
        [workload] = [w for w in workloads(api_client, namespace) if w["metadata"]["name"].startswith("split-r0-")]
        assert not is_admitted(workload)
        gpus = sorted(int(ps["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
                      for ps in workload["spec"]["podSets"] for _ in range(ps["count"]))
        assert gpus == [1, 2], workload["spec"]["podSets"]

        release_ranks(tmp_path)  # the holder ends, its quota and GPU go back
        assert jobs.exit_code("holder") == 0
        assert jobs.exit_code("split", JOB_TIMEOUT_S) == 0, jobs.report("split")
        # Admitted: the Lease taken to plan and pin (once more at most, had a GPU of the holder's
        # still been held then), not on a timer while it waited.
        assert 1 <= placement_leases_taken(jobs.logs("split")) <= 2, jobs.log_tail("split")
        plan = (jobs.pod("split")["metadata"].get("annotations") or {})[names.ANNOTATION_PLAN]
        assert plan == f"{pool.node('a')}=2,{pool.node('b')}=1"
        chief = jobs.pod("split-chief")["spec"]
        # Kueue's (the flavor's nodeLabels) beside --node-selector's, and the pin.
        assert chief["nodeSelector"] == {"distributetrain.test/flavor": pool.prefix, TEST_NODE_LABEL: pool.prefix}
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=split").items
        reasons = [e.reason for e in sorted(events, key=lambda e: e.metadata.creation_timestamp)]
        assert reasons.index("Queued") < reasons.index("Planned"), reasons


def test_under_topology_aware_scheduling_a_job_runs_on_the_node_kueue_assigned_it(
        kueue_running, api_client, namespace, jobs, tmp_path):
    """Kueue's TAS gives the one 2-GPU pod a node of two alike: b, the first by its rack
    (r1 before r2); the manager, left to itself, would take a, the first by name."""
    core = client.CoreV1Api(api_client)
    with node_pool(kueue_running, {"a": 2, "b": 2}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim, \
            topology(api_client, [RACK, names.HOSTNAME_LABEL]) as levels:
        for logical, rack in (("a", "r2"), ("b", "r1")):
            core.patch_node(pool.node(logical), {"metadata": {"labels": {RACK: f"{pool.prefix}-{rack}"}}})
        flavor = {"nodeLabels": {TEST_NODE_LABEL: pool.prefix}, "topologyName": levels}
        with gpu_queue(api_client, namespace, 2, flavor_spec=flavor) as queue:
            jobs.submit("tas", job_args(pool, claim, 2, f"--queue={queue.name}", script_args=("0",)))
            assert jobs.exit_code("tas", JOB_TIMEOUT_S) == 0, jobs.report("tas")
        plan = (jobs.pod("tas")["metadata"].get("annotations") or {})[names.ANNOTATION_PLAN]
        assert plan == f"{pool.node('b')}=2"
        chief = jobs.pod("tas-chief")["spec"]
        assert (chief["nodeName"], chief["nodeSelector"][names.HOSTNAME_LABEL]) == (pool.node("b"), pool.hostname("b"))


@pytest.mark.parametrize("restarts, code", [(1, 0), (0, 72)])
def test_a_higher_priority_job_preempts_a_running_one(kueue_running, api_client, namespace, jobs, tmp_path,
                                                       restarts, code):
    """With a restart left, the preempted job goes back to the queue and resumes from its
    checkpoint once the other is done; without, it ends with the preempted exit code."""
    with node_pool(kueue_running, {"a": 2}) as pool, \
            script_volume(api_client, namespace, SCRIPTS | {"ckpt.py": CHECKPOINTED}, tmp_path) as claim, \
            priority_classes(api_client, low=100, high=1000) as classes, \
            gpu_queue(api_client, namespace, 2, preemption={"withinClusterQueue": "LowerPriority"}) as queue:
        jobs.submit("low", job_args(pool, claim, 2, f"--queue={queue.name}", f"--priority-class={classes['low']}",
                                    f"--max-restarts={restarts}", "--filename=/work/ckpt.py", script_args=("low",)))
        poll_until(lambda: "start at step 0" in jobs.log_tail("low-chief"), QUEUED_TIMEOUT_S,
                   lambda: f"low training: {jobs.log_tail('low')}")
        jobs.submit("high", job_args(pool, claim, 2, f"--queue={queue.name}", f"--priority-class={classes['high']}",
                                     script_args=("0",)))
        assert jobs.exit_code("high", JOB_TIMEOUT_S) == 0, jobs.report("high")
        if restarts:
            poll_until(lambda: "start at step 1" in jobs.log_tail("low-chief-r1"), QUEUED_TIMEOUT_S,
                       lambda: f"low resumed: {jobs.log_tail('low')}")
            release_ranks(tmp_path)
        assert jobs.exit_code("low", JOB_TIMEOUT_S) == code, jobs.report("low")
        annotations = jobs.pod("low")["metadata"].get("annotations") or {}
        assert annotations.get(names.ANNOTATION_RESTARTS, "0") == str(restarts)
        assert "preempted" in jobs.logs("low").lower()


def test_queued_jobs_show_their_place_in_the_queue_from_kueue_s_visibility_api(
        kueue_running, api_client, namespace, jobs, tmp_path):
    with node_pool(kueue_running, {"a": 2}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim, \
            gpu_queue(api_client, namespace, 2) as queue:
        jobs.submit("holder", job_args(pool, claim, 2, f"--queue={queue.name}", script_args=("0", "hold")))
        jobs.wait_for("holder", lambda p: phase(p) == "Training", QUEUED_TIMEOUT_S)
        for name in ("first", "second"):
            jobs.submit(name, job_args(pool, claim, 1, f"--queue={queue.name}", script_args=("0",)))
            jobs.wait_for(name, lambda p: phase(p) == "Queued", QUEUED_TIMEOUT_S)
            time.sleep(1.1)  # workloads are ordered by creation time, to the second
        jobs.wait_for("first", lambda p: position(p) == "1", POSITION_TIMEOUT_S)
        jobs.wait_for("second", lambda p: position(p) == "2", POSITION_TIMEOUT_S)

        def cli(*args: str) -> str:
            result = subprocess.run([sys.executable, "-m", "distributetrain", *args, "-n", namespace,
                                     "--kubeconfig", str(kueue_running.kubeconfig)],
                                    capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
            assert result.returncode == 0, result.stderr
            return result.stdout

        listed = {line.split()[0]: line.split()[1:3] for line in cli("list").splitlines()[1:]}
        assert listed == {"holder": ["Training", "2"], "first": ["Queued", "#1"], "second": ["Queued", "#2"]}, listed
        assert json.loads(cli("status", "second", "-o", "json"))["queuePosition"] == 2

        release_ranks(tmp_path)  # the holder ends; both fit in its quota
        assert [jobs.exit_code(name, JOB_TIMEOUT_S) for name in ("holder", "first", "second")] == [0, 0, 0]
        assert json.loads(cli("status", "second", "-o", "json"))["queuePosition"] is None
        assert not position(jobs.pod("second"))  # cleared once admitted
