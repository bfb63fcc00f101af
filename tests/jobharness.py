"""Helpers for tests that run the manager as a pod under its ServiceAccount.

RBAC is the project's own ``rbac/``, re-targeted at the test's namespace (but the
placement Lease's grant, in the Lease's namespace, shared by all tests); the manager
pod is ``manager.yaml`` with the test's arguments; nodes are labelled per test so
concurrent tests never plan on each other's GPUs. Everything is removed afterwards.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import urllib3
import yaml
from kubernetes import client, watch

from distributetrain.core.names import JOB_USER_UID
from harness.polling import poll_until


REPO = Path(__file__).resolve().parents[1]

# A rank that must stay up while a test looks at it holds until the test writes "release"
# beside its script (see `release_ranks`), or 300 s pass so a failed test cannot leave it
# running. A fixed sleep raced the test on a slow machine: the job ended before it was seen.
HOLD_UNTIL_RELEASED = """\
def hold_until_released():
    import os, time
    release = os.path.join(os.path.dirname(os.path.abspath(__file__)), "release")
    give_up_at = time.monotonic() + 300
    while not os.path.exists(release) and time.monotonic() < give_up_at:
        time.sleep(0.2)
"""

# Stand-in training scripts: horovodrun starts one per GPU. `hello.py [CODE] [SLEEP_S|hold]`
# reports its rank, optionally sleeps (to be interrupted) or holds until released, and
# exits with CODE.
HELLO = HOLD_UNTIL_RELEASED + """\
import os, sys, time
print(f"rank={os.environ.get('HOROVOD_RANK')} size={os.environ.get('HOROVOD_SIZE')} host={os.uname().nodename}", flush=True)
if len(sys.argv) > 2 and sys.argv[2] == "hold":
    hold_until_released()
elif len(sys.argv) > 2:
    time.sleep(float(sys.argv[2]))
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""
SCRIPTS = {"hello.py": HELLO}


def job_args(pool: "NodePool", claim: str, gpus: int, *extra: str, script_args: tuple = ()) -> list[str]:
    """Manager arguments for a hello.py job on the test's own nodes."""
    return [f"--num-gpus={gpus}", "--image=distributetrain/base:0.1.0", f"--node-selector={pool.selector}",
            f"--pvc={claim}:/work", "--filename=/work/hello.py", "--worker-ready-timeout=60s", *extra,
            "--", *script_args]
TEST_NODE_LABEL = "distributetrain.test/nodes"
# The local nodes are kubelets on this 2-core machine: each has 2 CPUs, and the manager's
# defaults (2 CPUs and 8Gi per GPU, sized for real GPU nodes) would not fit a 1-GPU pod.
# Horovod's background thread negotiates with every peer each HOROVOD_CYCLE_TIME (1 ms by
# default since Horovod 0.21, for GPUs' latency): on these CPUs a fifth of a core per rank,
# idle or not. At 20 ms a 4-rank train.py job took a quarter less CPU, and no longer.
LOCAL_MACHINE_FLAGS = ("--cpu-per-gpu=100m", "--memory-per-gpu=2Gi", "--env=HOROVOD_CYCLE_TIME=20")
MANAGER_FINISH_TIMEOUT_S = 240.0
ENDED = ("Succeeded", "Failed")  # the phases of a pod that has ended
# A brand-new namespace's default ServiceAccount, and the webhooks' caches knowing it.
NAMESPACE_READY_TIMEOUT_S = 30.0
NAMESPACE_READY_POLL_S = 0.2
CLAIM_BOUND_TIMEOUT_S = 60.0
# A log read goes apiserver -> node agent; on a loaded 2-core machine the agent once took
# longer than the apiserver's 10 s TLS handshake limit (a 500 after all 13 managers of a
# test exited at once). A kubelet can be briefly unreachable too; the read is retried.
LOG_READ_RETRY_S = 60.0






def manager_pod(namespace: str, name: str, args: list[str], restart_policy: str = "Never") -> dict:
    """manager.yaml, renamed, with the test's arguments (after LOCAL_MACHINE_FLAGS, which they
    may override: the last of a flag wins)."""
    pod = yaml.safe_load((REPO / "manager.yaml").read_text())
    pod["metadata"].update(name=name, namespace=namespace)
    pod["metadata"]["labels"]["distributetrain.io/job"] = name
    pod["spec"]["restartPolicy"] = restart_policy
    pod["spec"]["containers"][0]["args"] = [*LOCAL_MACHINE_FLAGS, *args]
    # The manager runs on the test's own nodes, so another test stopping its nodes
    # never takes this test's manager with it.
    for arg in args:
        if arg.startswith(f"--node-selector={TEST_NODE_LABEL}="):
            pod["spec"]["nodeSelector"] = {TEST_NODE_LABEL: arg.rsplit("=", 1)[1]}
    return pod


@dataclass
class NodePool:
    """Fake-GPU nodes of one test: real node names are prefixed, the selector finds them.

    The first node of each group is named as on EKS (Karpenter) or kops/OpenStack: Node
    `<prefix>-a.ec2.internal` with the label kubernetes.io/hostname=<prefix>-a, so every job
    test runs where a Node's name and its hostname label differ.
    """

    prefix: str
    names: dict[str, str] = field(default_factory=dict)  # logical name -> node name
    hostnames: dict[str, str] = field(default_factory=dict)  # logical name -> kubernetes.io/hostname

    @property
    def selector(self) -> str:
        return f"{TEST_NODE_LABEL}={self.prefix}"

    def node(self, logical: str) -> str:
        return self.names[logical]

    def hostname(self, logical: str) -> str:
        """The node's hostname label, which is also what a hostNetwork pod there sees as its hostname."""
        return self.hostnames[logical]


@contextmanager
def node_pool(cluster, spec: dict[str, int], **kwargs) -> Iterator[NodePool]:
    pool = NodePool("n" + uuid.uuid4().hex[:6])
    with more_nodes(cluster, pool, spec, **kwargs):
        yield pool


@contextmanager
def more_nodes(cluster, pool: NodePool, spec: dict[str, int], labels: Mapping[str, str] | None = None,
               **kwargs) -> Iterator:
    """Nodes added to ``pool`` as a node group of their own (yielded), which a test can stop alone;
    ``labels`` are on each of them besides the pool's own (e.g. a rack's).

    The group's first node is named as on EKS (see NodePool)."""
    for position, logical in enumerate(spec):
        hostname = f"{pool.prefix}-{logical}"
        pool.hostnames[logical] = hostname
        pool.names[logical] = f"{hostname}.ec2.internal" if position == 0 else hostname
    group = cluster.add_nodes({pool.names[k]: v for k, v in spec.items()}, labels={TEST_NODE_LABEL: pool.prefix, **(labels or {})},
                              hostnames={pool.names[k]: pool.hostnames[k] for k in spec}, **kwargs)
    try:
        yield group
    finally:
        group.stop()


def create_pod(core: client.CoreV1Api, namespace: str, manifest: dict) -> None:
    """Create a pod; in a brand-new namespace, wait for its default ServiceAccount first, and
    for the admission webhooks' caches to know the namespace (Kueue's pod webhook answers
    404 "Namespace ... not found" until its cache has it)."""
    give_up_at = time.monotonic() + NAMESPACE_READY_TIMEOUT_S
    while True:
        try:
            core.create_namespaced_pod(namespace, manifest)
            return
        except client.ApiException as error:
            missing_account = error.status == 403 and "error looking up service account" in (error.body or "")
            namespace_unseen = error.status == 404 and "admission webhook" in (error.body or "")
            if not (missing_account or namespace_unseen) or time.monotonic() > give_up_at:
                raise
            time.sleep(NAMESPACE_READY_POLL_S)



class Jobs:
    """Submit manager pods into one namespace and follow them."""

    def __init__(self, api_client, namespace: str):
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace

    def submit(self, name: str, args: list[str], restart_policy: str = "Never") -> None:
        create_pod(self.core, self.namespace, manager_pod(self.namespace, name, args, restart_policy))

    def pods(self) -> dict[str, dict]:
        raw = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        return {p["metadata"]["name"]: p for p in json.loads(raw.data)["items"]}

    def secrets(self, prefix: str) -> list[str]:
        raw = json.loads(self.core.list_namespaced_secret(self.namespace, _preload_content=False).data)
        return [s["metadata"]["name"] for s in raw["items"] if s["metadata"]["name"].startswith(prefix)]

    def pod(self, name: str) -> dict | None:
        return self.pods().get(name)

    def wait_for(self, name: str, predicate: Callable[[dict], bool], timeout_s: float) -> dict:
        """Watch one pod until ``predicate(pod)``; AssertionError with its state on timeout.

        After every watch request, however it ended, the pod is also read once: a read is
        served from etcd, so the wait holds even while the apiserver's watch cache fails
        this watch for a long time (as it did under ten managers' load: no event in 300 s).
        """
        give_up_at = time.monotonic() + timeout_s
        last: dict | None = None
        last_error = "none"
        while time.monotonic() < give_up_at:
            stream = watch.Watch().stream(
                self.core.list_namespaced_pod, self.namespace, field_selector=f"metadata.name={name}",
                timeout_seconds=max(1, int(min(30, give_up_at - time.monotonic()))),
            )
            try:
                for event in stream:
                    if event["type"] == "ERROR":
                        last_error = f"ERROR event: {event['raw_object']}"
                        break
                    last = client.ApiClient().sanitize_for_serialization(event["object"])
                    if predicate(last):
                        return last
            except (client.ApiException, urllib3.exceptions.HTTPError) as e:
                # The test's own watch rides out apiserver restarts and a lagging watch cache.
                if isinstance(e, client.ApiException) and e.status not in (410, 429, 500, 503, 504):
                    raise
                last_error = f"{type(e).__name__} {getattr(e, 'status', '')} {getattr(e, 'reason', '') or e}"
                time.sleep(0.5)
            try:
                last = json.loads(self.core.read_namespaced_pod(name, self.namespace, _preload_content=False).data)
            except (client.ApiException, urllib3.exceptions.HTTPError) as e:
                last_error = f"read: {type(e).__name__} {getattr(e, 'status', '')} {getattr(e, 'reason', '') or e}"
            else:
                if predicate(last):
                    return last
        raise AssertionError(f"pod {name} did not reach the expected state in {timeout_s}s "
                             f"(last watch error: {last_error}); last: "
                             f"{json.dumps((last or {}).get('status'), indent=1)[:3000]}\n"
                             f"its log (tail):\n{self.log_tail(name)}")

    def ended(self, name: str) -> bool:
        """Whether the pod has ended (a wait on what it would do can stop)."""
        return (self.pod(name) or {}).get("status", {}).get("phase") in ENDED

    def exit_code(self, name: str, timeout_s: float = MANAGER_FINISH_TIMEOUT_S) -> int:
        pod = self.wait_for(name, lambda p: p["status"].get("phase") in ENDED, timeout_s)
        terminated = (pod["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("terminated")
        assert terminated, f"pod {name} ended without a container exit code: {json.dumps(pod['status'])[:2000]}"
        return terminated["exitCode"]

    def logs(self, name: str, container: str | None = None) -> str:
        give_up_at = time.monotonic() + LOG_READ_RETRY_S
        while True:
            try:
                return self.core.read_namespaced_pod_log(name, self.namespace, container=container)
            except client.ApiException as e:
                # 500: the apiserver could not reach the node; anything else is the answer.
                if e.status != 500 or time.monotonic() > give_up_at:
                    raise
            time.sleep(1)

    @contextmanager
    def recording(self, name: str) -> Iterator[list[str]]:
        """The pod's log, timestamped, kept as it is written: for a failure message about a
        pod the manager deletes before the test can read it (a lost worker's chief)."""
        lines: list[str] = []
        stop = threading.Event()

        def follow() -> None:
            seen: set[str] = set()  # a reconnect reads the log from its start again
            while not stop.is_set():
                try:
                    stream = self.core.read_namespaced_pod_log(
                        name, self.namespace, follow=True, timestamps=True,
                        _preload_content=False, _request_timeout=(5, 10))
                    for raw in stream:  # urllib3 yields whole lines
                        line = raw.decode(errors="replace").rstrip("\n")
                        if line not in seen:
                            seen.add(line)
                            lines.append(line)
                except Exception:  # noqa: BLE001 - not there yet, quiet, or gone: read again
                    pass
                stop.wait(1)

        thread = threading.Thread(target=follow, name=f"log-{name}", daemon=True)
        thread.start()
        try:
            yield lines
        finally:
            stop.set()
            thread.join(15)

    def log_tail(self, name: str, lines: int = 80) -> str:
        """For failure messages: never raises, so the original failure is what gets reported."""
        try:
            return self.core.read_namespaced_pod_log(name, self.namespace, tail_lines=lines)
        except Exception as e:  # noqa: BLE001 - the pod may be gone or its node stopped
            return f"(no log: {e.__class__.__name__}; {self._where_it_stands(name)})"

    def _where_it_stands(self, name: str) -> str:
        """A pod without a log: whether it exists, its phase, node and conditions' words."""
        try:
            pod = self.pod(name)
        except Exception as e:  # noqa: BLE001 - only for a failure message
            return f"pod unreadable: {e.__class__.__name__}"
        if pod is None:
            return "no such pod"
        status = pod.get("status") or {}
        said = [f"{c.get('type')}={c.get('status')} {c.get('reason') or ''} {c.get('message') or ''}".strip()
                for c in status.get("conditions") or []]
        return f"phase {status.get('phase')}, node {pod['spec'].get('nodeName') or 'none'}, {'; '.join(said)}"

    def report(self, job: str) -> str:
        """For a job's failure message: its manager's log and its chief's last lines (the
        chief is kept when it fails; its own words are often the reason)."""
        return f"{self.log_tail(job, lines=200)}\n--- {job}-chief ---\n{self.log_tail(f'{job}-chief')}"

    def wait_gone(self, names: list[str], timeout_s: float = 60.0) -> None:
        poll_until(lambda: not [n for n in names if n in self.pods()], timeout_s,
                   lambda: f"pods still present: {[n for n in names if n in self.pods()]}")






def release_ranks(tmp_path: Path) -> None:
    """Lets every rank holding in ``script_volume(..., tmp_path)`` go on (HOLD_UNTIL_RELEASED)."""
    (tmp_path / "volume" / "release").touch()


@contextmanager
def script_volume(api_client, namespace: str, files: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """A PVC bound to a hostPath PV holding ``files``; yields the claim name."""
    directory = tmp_path / "volume"
    directory.mkdir()
    for name, text in files.items():
        (directory / name).write_text(text)
    # Job pods run as their non-root user and a hostPath volume ignores fsGroup: the volume
    # is that user's to write, as a provisioner honouring fsGroup makes it.
    os.chown(directory, JOB_USER_UID, JOB_USER_UID)
    core = client.CoreV1Api(api_client)
    pv_name = f"pv-{namespace}"[:63]
    claim = "scripts"
    core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(directory)},
                 "claimRef": {"namespace": namespace, "name": claim}},
    })
    core.create_namespaced_persistent_volume_claim(namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv_name,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })
    try:
        # A job submitted on an unbound claim would wait (unschedulable) until it binds.
        poll_until(lambda: core.read_namespaced_persistent_volume_claim(claim, namespace).status.phase == "Bound",
                   CLAIM_BOUND_TIMEOUT_S, f"claim {claim} Bound", interval_s=0.2)
        yield claim
    finally:
        try:
            core.delete_persistent_volume(pv_name)
        except client.ApiException as e:
            if e.status != 404:
                raise


def _volume_files(directory: Path, files: Mapping[str, str]) -> None:
    directory.mkdir(parents=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    os.chown(directory, JOB_USER_UID, JOB_USER_UID)  # the job user's to write (see script_volume)


@contextmanager
def node_volume(api_client, namespace: str, claim: str, directory: Path, files: Mapping[str, str] = {},
                modes: tuple[str, ...] = ("ReadWriteMany",), hostnames: tuple[str, ...] = ()) -> Iterator[str]:
    """A claim bound to a PV on ``directory`` holding ``files``: with ``hostnames``, a local
    volume only those nodes mount (its node affinity, which the scheduler enforces, as a
    zonal disk's); without, a hostPath one any node mounts. ``modes`` are the PV's and the
    claim's access modes. Yields the claim's name."""
    _volume_files(directory, files)
    core = client.CoreV1Api(api_client)
    pv_name = f"pv-{claim}-{uuid.uuid4().hex[:8]}"  # cluster-scoped: unique whatever the namespace's length
    source = ({"local": {"path": str(directory)}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(hostnames)}]}]}}}
        if hostnames else {"hostPath": {"path": str(directory)}})
    core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": list(modes), "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "claimRef": {"namespace": namespace, "name": claim},
                 **source}})
    core.create_namespaced_persistent_volume_claim(namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
        "spec": {"accessModes": list(modes), "storageClassName": "", "volumeName": pv_name,
                 "resources": {"requests": {"storage": "1Gi"}}}})
    try:
        poll_until(lambda: core.read_namespaced_persistent_volume_claim(claim, namespace).status.phase == "Bound",
                   CLAIM_BOUND_TIMEOUT_S, f"claim {claim} Bound", interval_s=0.2)
        yield claim
    finally:
        _delete_cluster_scoped(lambda: core.delete_persistent_volume(pv_name))


@contextmanager
def unbound_volume(api_client, namespace: str, claim: str, directory: Path) -> Iterator[str]:
    """A claim of a WaitForFirstConsumer class without a provisioner (as local volumes are
    set up), unbound until the scheduler binds it to the one PV of that class, a hostPath
    one, for the job's first pod. Yields the claim's name."""
    _volume_files(directory, {})
    core, storage = client.CoreV1Api(api_client), client.StorageV1Api(api_client)
    name = f"wait-{claim}-{uuid.uuid4().hex[:8]}"  # the class and its one PV: cluster-scoped, unique
    storage.create_storage_class({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": name}, "provisioner": "kubernetes.io/no-provisioner",
                                  "volumeBindingMode": "WaitForFirstConsumer"})
    core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": name,
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(directory)}}})
    core.create_namespaced_persistent_volume_claim(namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": name,
                 "resources": {"requests": {"storage": "1Gi"}}}})
    try:
        yield claim
    finally:
        _delete_cluster_scoped(lambda: core.delete_persistent_volume(name))
        _delete_cluster_scoped(lambda: storage.delete_storage_class(name))


def _delete_cluster_scoped(delete: Callable[[], object]) -> None:
    try:
        delete()
    except client.ApiException as e:
        if e.status != 404:
            raise
