"""The benchmarks' own corner of the shared local cluster, and clocks on what happens in it.

The local cluster (``localcluster``) is shared with other engineers' test sessions, so a
benchmark never takes it down unless it started it, works in a namespace of its own,
and plans only on nodes it added under its own label. Everything it creates is removed
on the way out, even on failure.

Timings come from two clocks read in this process: the manager's log records (it runs
in-process, so ``record.created`` is when it acted) and a watch on the namespace's pods
(when the API server reported each pod added, Ready, finished, deleted). Both are
wall-clock (``time.time()``) so they can be subtracted; pod timestamps stored by the
API server have one-second resolution, too coarse for this.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import urllib3
from kubernetes import client

from distributetrain.cli import main as cli, jobflags
from distributetrain.core.settings import JobSettings
from localcluster import netsetup
from localcluster.cluster import Cluster
from localcluster.errors import ClusterNotRunning

log = logging.getLogger(__name__)

NODE_LABEL = "distributetrain.bench/nodes"
NAMESPACE_LABEL = "distributetrain.bench/namespace"
WATCH_WINDOW_S = 5  # each watch request's server timeout; also the watcher's stop latency
DELETE_WAIT_S = 120.0
POLL_S = 0.5
WATCH_RETRY_S = 2.0
SCRIPT_MOUNT = "/bench"
NOOP_SCRIPT = "noop.py"
# The stand-in manager pod never runs: it only owns the job's objects and carries its
# annotations, like the real manager pod. No node has this label, so it stays Pending.
UNSCHEDULABLE_SELECTOR = {"distributetrain.bench/never": "true"}


def short_id() -> str:
    return uuid.uuid4().hex[:6]


@contextmanager
def local_cluster() -> Iterator[Cluster]:
    """Attach to the running cluster; start it if none runs, and then take it down after."""
    try:
        cluster = Cluster.attach()
        started = False
    except ClusterNotRunning:
        log.info("no local cluster running; starting one (it is taken down afterwards)")
        cluster = Cluster.up()
        started = True
    try:
        yield cluster
    finally:
        if started:
            cluster.down()


def job_settings(manager_namespace: str, *flags: str, script_args: tuple[str, ...] = ()) -> JobSettings:
    """A job's settings parsed by the manager's own CLI, as ``manager.sh`` passes them."""
    os.environ[jobflags.ENV_POD_NAMESPACE] = manager_namespace  # what the downward API would set
    # The manager runs in this process: its chiefs ask it for their hosts at this host's
    # address on the cluster's bridge.
    os.environ[jobflags.ENV_POD_IP] = netsetup.HOST_IP
    args = cli.build_parser().parse_args(["run", f"--namespace={manager_namespace}", *flags])
    return jobflags.settings_from_args(args, list(script_args))


@contextmanager
def node_pool(cluster: Cluster, prefix: str, spec: dict[str, int]) -> Iterator[str]:
    """Nodes ``{prefix}-{name}`` with fake GPUs, labelled; yields the node selector."""
    group = cluster.add_nodes({f"{prefix}-{name}": gpus for name, gpus in spec.items()},
                              labels={NODE_LABEL: prefix})
    try:
        yield f"{NODE_LABEL}={prefix}"
    finally:
        group.stop()


@contextmanager
def namespace(api_client, prefix: str) -> Iterator[str]:
    """A fresh namespace, deleted (with everything in it) afterwards."""
    core = client.CoreV1Api(api_client)
    name = f"{prefix}-{short_id()}"
    core.create_namespace({"metadata": {"name": name, "labels": {NAMESPACE_LABEL: "true"}}})
    try:
        yield name
    finally:
        core.delete_namespace(name)


@contextmanager
def script_volume(api_client, namespace_name: str, files: dict[str, str]) -> Iterator[str]:
    """A PVC on a hostPath PV holding ``files`` (pods run on this host); yields the claim."""
    core = client.CoreV1Api(api_client)
    directory = Path(tempfile.mkdtemp(prefix=f"dt-bench-{namespace_name}-"))
    for filename, text in files.items():
        (directory / filename).write_text(text)
    directory.chmod(0o755)
    pv_name, claim = f"{namespace_name}-scripts", "scripts"
    core.create_persistent_volume({
        "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(directory)},
                 "claimRef": {"namespace": namespace_name, "name": claim}},
    })
    core.create_namespaced_persistent_volume_claim(namespace_name, {
        "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv_name,
                 "resources": {"requests": {"storage": "1Mi"}}},
    })
    try:
        yield claim
    finally:
        core.delete_persistent_volume(pv_name)
        shutil.rmtree(directory, ignore_errors=True)


def stand_in_manager(api_client, namespace_name: str, name: str) -> str:
    """Create the Pending pod that stands for the manager pod; return its uid."""
    pod = client.CoreV1Api(api_client).create_namespaced_pod(namespace_name, {
        "metadata": {"name": name, "labels": {"distributetrain.io/role": "manager"}},
        "spec": {"nodeSelector": UNSCHEDULABLE_SELECTOR, "restartPolicy": "Never",
                 "containers": [{"name": "manager", "image": "distributetrain/manager:0.1.0",
                                 "command": ["/bin/true"]}]},
    })
    return pod.metadata.uid


def delete_pods(api_client, namespace_name: str, label_selector: str = "") -> None:
    """Delete pods and wait until they are gone, so the next run starts from a clean slate."""
    core = client.CoreV1Api(api_client)
    core.delete_collection_namespaced_pod(namespace_name, label_selector=label_selector,
                                          grace_period_seconds=0)
    give_up_at = time.monotonic() + DELETE_WAIT_S
    while core.list_namespaced_pod(namespace_name, label_selector=label_selector, limit=1).items:
        if time.monotonic() > give_up_at:
            raise TimeoutError(f"pods in {namespace_name} not gone after {DELETE_WAIT_S:.0f}s")
        time.sleep(POLL_S)


class WatchGone(RuntimeError):
    """The watch ended with an error event (usually 410 Gone: history compacted)."""


def pod_log(api_client, namespace_name: str, name: str) -> str:
    """A pod's log, or why there is none (the pod may be gone)."""
    try:
        return client.CoreV1Api(api_client).read_namespaced_pod_log(name, namespace_name)
    except client.ApiException as error:
        return f"(no log: {error.status} {error.reason})"


@dataclass
class PodTimes:
    """When the API server reported each step of one pod (``time.time()`` of receipt)."""

    added: float | None = None
    bound: float | None = None  # given its node (spec.nodeName)
    running: float | None = None  # phase Running: its containers started
    ready: float | None = None
    finished: float | None = None
    phase: str = ""
    deleted: float | None = None


def is_ready(pod: dict) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass
class PodTimeline:
    """A background watch on one namespace's pods, recording ``PodTimes`` per pod."""

    api_client: object
    namespace: str
    pods: dict[str, PodTimes] = field(default_factory=dict)
    disturbed: bool = False  # the watch broke at least once: some times are late
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> PodTimeline:
        core = client.CoreV1Api(self.api_client)
        version = core.list_namespaced_pod(self.namespace, limit=1).metadata.resource_version
        self._thread = threading.Thread(target=self._run, args=(core, version), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def _run(self, core: client.CoreV1Api, version: str) -> None:
        while not self._stop.is_set():
            try:
                response = core.list_namespaced_pod(
                    self.namespace, watch=True, resource_version=version, allow_watch_bookmarks=True,
                    timeout_seconds=WATCH_WINDOW_S, _preload_content=False,
                )
                try:
                    for line in response:
                        if line.strip():
                            version = self._record(json.loads(line)) or version
                finally:
                    response.release_conn()
            except (WatchGone, client.ApiException, urllib3.exceptions.HTTPError, OSError) as error:
                # Someone restarted the API server (the cluster is shared): events were
                # missed, so the run's times are not trustworthy. Catch up and go on.
                if not self.disturbed:
                    log.warning("pod watch interrupted (%s); the run is marked disturbed", error)
                self.disturbed = True
                time.sleep(WATCH_RETRY_S)
                version = self._relist(core) or version

    def _relist(self, core: client.CoreV1Api) -> str:
        try:
            listing = json.loads(core.list_namespaced_pod(self.namespace, _preload_content=False).data)
        except (client.ApiException, urllib3.exceptions.HTTPError, OSError):
            return ""
        for pod in listing["items"]:
            self._record({"type": "MODIFIED", "object": pod})
        return listing["metadata"]["resourceVersion"]

    def _record(self, event: dict) -> str:
        now = time.time()
        pod = event["object"]
        if event["type"] == "ERROR":
            raise WatchGone(f"pod watch failed: {pod.get('message')}")
        if event["type"] != "BOOKMARK":
            times = self.pods.setdefault(pod["metadata"]["name"], PodTimes())
            if times.added is None:
                times.added = now
            if times.bound is None and (pod.get("spec") or {}).get("nodeName"):
                times.bound = now
            if times.running is None and (pod.get("status") or {}).get("phase") == "Running":
                times.running = now
            if times.ready is None and is_ready(pod):
                times.ready = now
            phase = (pod.get("status") or {}).get("phase", "")
            if times.finished is None and phase in ("Succeeded", "Failed"):
                times.finished, times.phase = now, phase
            if event["type"] == "DELETED":
                times.deleted = now
        return pod["metadata"].get("resourceVersion", "")


class LogClock(logging.Handler):
    """Keeps (time, message) of every record of a logger: when the manager did what."""

    def __init__(self, logger_name: str = "distributetrain"):
        super().__init__(logging.INFO)
        self.records: list[tuple[float, str]] = []
        self._logger = logging.getLogger(logger_name)

    def __enter__(self) -> LogClock:
        self._logger.addHandler(self)
        self._logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._logger.removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.created, record.getMessage()))

    def first(self, needle: str) -> float | None:
        return next((t for t, message in self.records if needle in message), None)

    def last(self, needle: str) -> float | None:
        return next((t for t, message in reversed(self.records) if needle in message), None)
