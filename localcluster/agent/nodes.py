"""Node objects: registration, Lease heartbeats, status reports, and removal.

The node lifecycle controller marks a node NotReady (and taints it) when its
Lease in kube-node-lease is not renewed within the grace period, so the
heartbeat renews every 10 s like the kubelet; the status with its conditions
is re-posted every minute. Taints and unschedulable are never written here:
tests and users cordon and taint nodes, and the controller manages the
not-ready taint.

A kubelet restart is played out on request (a file the launcher writes, see
controls.py): the node reports Ready=False with the kubelet's PLEG message for
a few seconds, then Ready again, while its pods run on untouched.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import platform
import threading
import time
from dataclasses import dataclass

from localcluster.agent import controls
from localcluster.agent.gotime import go_duration
from localcluster.agent.kubeapi import STRATEGIC_MERGE_PATCH, ApiError, Conflict, KubeApi, NotFound, Unavailable
from localcluster.agent.settings import AgentSettings, NodeSpec

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40
LEASE_RENEW_INTERVAL_S = 10
STATUS_REPORT_INTERVAL_S = 60
SCHEDULABLE_POLL_S = 0.5
# How soon a requested kubelet restart shows (and ends) on the Node.
CONTROL_POLL_S = 0.5
# The kubelet's PLEG relist threshold: past it the node reports "PLEG is not healthy".
PLEG_THRESHOLD_S = 180
# A PLEG that stalled a few seconds past the threshold, as the kubelet first reports it.
PLEG_OVERDUE_S = 5
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
RUNTIME_VERSION = "localcluster://0.1.0"

CPU_CAPACITY = "64"
MEMORY_CAPACITY = "256Gi"
PODS_CAPACITY = "110"
EPHEMERAL_STORAGE_CAPACITY = "500Gi"

_PRESSURE_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


@dataclass(frozen=True)
class Readiness:
    """The node's Ready condition: its value and when it last changed."""

    ready: bool
    since: datetime.datetime


def ready_condition(readiness: Readiness, now: datetime.datetime) -> tuple[str, str, str, str]:
    """(type, status, reason, message) of Ready; not ready is the kubelet's stalled-PLEG report."""
    if readiness.ready:
        return "Ready", "True", "KubeletReady", "kubelet is posting ready status"
    stalled_s = PLEG_THRESHOLD_S + PLEG_OVERDUE_S + (now - readiness.since).total_seconds()
    return ("Ready", "False", "KubeletNotReady",
            f"PLEG is not healthy: pleg was last seen active {go_duration(stalled_s)} ago; "
            f"threshold is {go_duration(PLEG_THRESHOLD_S)}")


class NodeServedElsewhere(Exception):
    """Another live agent registered a node of the same name."""


def rfc3339(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime.datetime:
    """A Time or MicroTime from the API (RFC 3339, UTC)."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def micro_time(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_resources(settings: AgentSettings, node: NodeSpec) -> dict[str, str]:
    """Capacity, which is also allocatable (nothing is reserved on a fake node)."""
    return {
        "cpu": CPU_CAPACITY,
        "memory": MEMORY_CAPACITY,
        "pods": PODS_CAPACITY,
        "ephemeral-storage": EPHEMERAL_STORAGE_CAPACITY,
        settings.gpu_resource: str(node.gpus),
    }


def _os_image() -> str:
    try:
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return "Linux"


def _boot_id() -> str:
    try:
        return open("/proc/sys/kernel/random/boot_id").read().strip()
    except OSError:
        return ""


def node_info(node: NodeSpec, kubelet_version: str) -> dict:
    machine_id = hashlib.sha256(node.name.encode()).hexdigest()[:32]
    return {
        "machineID": machine_id,
        "systemUUID": f"{machine_id[:8]}-{machine_id[8:12]}-{machine_id[12:16]}-{machine_id[16:20]}-{machine_id[20:]}",
        "bootID": _boot_id(),
        "kernelVersion": platform.release(),
        "osImage": _os_image(),
        "containerRuntimeVersion": RUNTIME_VERSION,
        "kubeletVersion": kubelet_version,
        "operatingSystem": "linux",
        "architecture": "amd64",
    }


def node_status(settings: AgentSettings, node: NodeSpec, kubelet_version: str, since: datetime.datetime,
                now: datetime.datetime, readiness: Readiness | None = None) -> dict:
    """The status the kubelet posts; Ready since `since` unless `readiness` says otherwise."""
    resources = node_resources(settings, node)
    readiness = readiness or Readiness(True, since)
    conditions = [(condition, since) for condition in _PRESSURE_CONDITIONS]
    conditions.append((ready_condition(readiness, now), readiness.since))
    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            {"type": kind, "status": status, "reason": reason, "message": message,
             "lastHeartbeatTime": rfc3339(now), "lastTransitionTime": rfc3339(changed)}
            for (kind, status, reason, message), changed in conditions
        ],
        # The Hostname address is the machine's hostname, like the label (not the Node's name).
        "addresses": [{"type": "InternalIP", "address": node.ip}, {"type": "Hostname", "address": node.hostname}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": settings.kubelet_port}},
        "nodeInfo": node_info(node, kubelet_version),
    }


def node_labels(settings: AgentSettings, node: NodeSpec) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": node.hostname,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        **settings.labels,
    }


def node_object(settings: AgentSettings, node: NodeSpec, kubelet_version: str, now: datetime.datetime) -> dict:
    """The Node as first registered: labels, podCIDR, the agent's taints and a Ready status."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": node_labels(settings, node),
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"podCIDR": node.pod_cidr, "podCIDRs": [node.pod_cidr],
                 **({"taints": [dict(t) for t in settings.taints]} if settings.taints else {})},
        "status": node_status(settings, node, kubelet_version, now, now),
    }


def lease_object(node: NodeSpec, node_uid: str, now: datetime.datetime) -> dict:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node.name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node_uid}],
        },
        "spec": {"holderIdentity": node.name, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": micro_time(now)},
    }


def _lease_path(name: str = "") -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
    return f"{path}/{name}" if name else path


def schedulable(node_obj: dict) -> bool:
    """Ready, and the controller has lifted the taints it puts on nodes that are not ready."""
    conditions = {c["type"]: c["status"] for c in node_obj.get("status", {}).get("conditions") or []}
    taints = {t["key"] for t in node_obj.get("spec", {}).get("taints") or []}
    return conditions.get("Ready") == "True" and not taints & {NOT_READY_TAINT, UNREACHABLE_TAINT}


class NodeHeartbeat(threading.Thread):
    """Registers this agent's nodes and keeps them Ready until stopped."""

    def __init__(self, api: KubeApi, settings: AgentSettings, kubelet_version: str):
        super().__init__(name="node-heartbeat", daemon=True)
        self._api = api
        self._settings = settings
        self._version = kubelet_version
        self._since: dict[str, datetime.datetime] = {}
        self._stop = threading.Event()
        self._api_down = False
        self._deleted: set[str] = set()
        self._registered: set[str] = set()
        self._readiness: dict[str, Readiness] = {}
        # Monotonic times at which nodes in a kubelet restart are Ready again.
        self._not_ready_until: dict[str, float] = {}
        # Nodes whose change of Ready is still to be posted.
        self._unposted: set[str] = set()

    def register_all(self) -> None:
        for node in self._settings.nodes:
            self._register(node)

    def wait_until_unserved(self, stop: threading.Event) -> None:
        """Wait for the Leases of existing same-named Nodes to lapse; NodeServedElsewhere if one is renewed.

        A crashed agent's Lease stops being renewed and lapses; a live agent's is
        renewed every 10 s, and two agents running the same node's pods would
        fight over their statuses.
        """
        renewals = {node.name: self._lease_renew_time(node.name) for node in self._settings.nodes}
        deadline = time.monotonic() + LEASE_DURATION_S + LEASE_RENEW_INTERVAL_S
        while not stop.is_set():
            now = datetime.datetime.now(datetime.timezone.utc)
            fresh = {name: renewed for name, renewed in renewals.items()
                     if renewed is not None and (now - renewed).total_seconds() < LEASE_DURATION_S}
            if not fresh or time.monotonic() > deadline:
                return
            log.info("nodes %s: Leases renewed recently; waiting for them to lapse", ", ".join(sorted(fresh)))
            stop.wait(LEASE_RENEW_INTERVAL_S / 2)
            for name, renewed in fresh.items():
                latest = self._lease_renew_time(name)
                if latest is not None and latest > renewed:
                    raise NodeServedElsewhere(f"node {name} is served by another live agent (its Lease is renewed)")

    def _lease_renew_time(self, name: str) -> datetime.datetime | None:
        try:
            renew = self._api.get(_lease_path(name)).get("spec", {}).get("renewTime")
        except NotFound:
            return None
        return parse_time(renew) if renew else None

    def _register(self, node: NodeSpec) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        self._since[node.name] = now
        self._readiness[node.name] = Readiness(True, now)
        body = node_object(self._settings, node, self._version, now)
        try:
            created = self._api.create("/api/v1/nodes", body)
            log.info("node %s: registered (%s GPUs, podCIDR %s)", node.name, node.gpus, node.pod_cidr)
        except Conflict:
            # Left by an earlier agent: take it over, keeping taints and cordon others set.
            metadata = {"labels": body["metadata"]["labels"]}
            created = self._api.patch(f"/api/v1/nodes/{node.name}", {"metadata": metadata})
            self._post_status(node, now)
            log.info("node %s: took over existing Node", node.name)
        self._registered.add(node.name)
        self._renew_lease(node, created["metadata"]["uid"], now)

    def _post_status(self, node: NodeSpec, now: datetime.datetime) -> None:
        status = node_status(self._settings, node, self._version, self._since[node.name], now,
                             self._readiness[node.name])
        self._api.patch(f"/api/v1/nodes/{node.name}/status", {"status": status}, STRATEGIC_MERGE_PATCH)

    def _renew_lease(self, node: NodeSpec, node_uid: str | None, now: datetime.datetime) -> None:
        spec = {"holderIdentity": node.name, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": micro_time(now)}
        try:
            self._api.patch(_lease_path(node.name), {"spec": spec})
        except NotFound:
            if node_uid is None:
                node_uid = self._api.get(f"/api/v1/nodes/{node.name}")["metadata"]["uid"]
            self._api.create(_lease_path(), lease_object(node, node_uid, now))

    def wait_schedulable(self, stop: threading.Event) -> bool:
        """Wait until every node is Ready without not-ready taints; False if stopped first."""
        waiting = {node.name for node in self._settings.nodes}
        while waiting and not stop.is_set():
            for name in sorted(waiting):
                try:
                    if schedulable(self._api.get(f"/api/v1/nodes/{name}")):
                        waiting.discard(name)
                except (Unavailable, ApiError) as error:
                    log.debug("node %s: not readable yet: %s", name, error)
            if waiting:
                stop.wait(SCHEDULABLE_POLL_S)
        return not waiting

    def run(self) -> None:
        last_status = next_beat = time.monotonic()
        while not self._stop.wait(CONTROL_POLL_S):
            self._follow_kubelet_restarts()
            if time.monotonic() - next_beat < LEASE_RENEW_INTERVAL_S:
                continue
            next_beat = time.monotonic()
            report_status = next_beat - last_status >= STATUS_REPORT_INTERVAL_S
            for node in self._settings.nodes:
                if node.name not in self._deleted:
                    self._beat(node, report_status)
            if report_status:
                last_status = time.monotonic()

    def _follow_kubelet_restarts(self) -> None:
        """Begin the kubelet restarts asked for, end those whose time is up; post each change of Ready.

        Only the Ready condition changes: the Lease is renewed throughout (a kubelet
        whose PLEG stalls is alive), so the node lifecycle controller sees the kubelet
        say "not Ready", not a silent node, and the pods run on.
        """
        now_s = time.monotonic()
        for name, not_ready_s in controls.take_kubelet_restarts(self._settings.state_dir).items():
            if name not in self._readiness:
                log.warning("kubelet restart asked for %s, which this agent does not run", name)
                continue
            log.info("node %s: kubelet restarting, not Ready for %ss", name, not_ready_s)
            if self._readiness[name].ready:
                self._set_ready(name, False)
            self._not_ready_until[name] = max(self._not_ready_until.get(name, 0.0), now_s + not_ready_s)
        for name, until in list(self._not_ready_until.items()):
            if now_s >= until:
                del self._not_ready_until[name]
                self._set_ready(name, True)
                log.info("node %s: kubelet restarted, Ready again", name)
        for node in self._settings.nodes:
            if node.name in self._unposted and node.name not in self._deleted:
                try:
                    self._post_status(node, datetime.datetime.now(datetime.timezone.utc))
                    self._unposted.discard(node.name)
                except NotFound:
                    self._deleted.add(node.name)
                except (Unavailable, ApiError) as error:
                    log.warning("node %s: Ready change not posted yet, retrying: %s", node.name, error)

    def _set_ready(self, name: str, ready: bool) -> None:
        self._readiness[name] = Readiness(ready, datetime.datetime.now(datetime.timezone.utc))
        self._unposted.add(name)

    def _beat(self, node: NodeSpec, report_status: bool) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        try:
            if report_status:
                self._post_status(node, now)
            self._renew_lease(node, None, now)
            if self._api_down:
                log.info("apiserver reachable again; heartbeats resumed")
                self._api_down = False
        except NotFound:
            # Like the kubelet, register only once: a deleted Node stays deleted.
            log.warning("node %s: the Node object was deleted; not heartbeating it any more", node.name)
            self._deleted.add(node.name)
        except Unavailable as error:
            if not self._api_down:
                log.warning("heartbeat failed, apiserver unreachable: %s", error)
                self._api_down = True
        except ApiError as error:
            log.error("node %s: heartbeat rejected: %s", node.name, error)

    def stop_and_delete(self) -> None:
        """Stop beating and delete the Nodes (and their Leases) this agent registered."""
        self._stop.set()
        for node in self._settings.nodes:
            if node.name not in self._registered:
                continue
            for path in (_lease_path(node.name), f"/api/v1/nodes/{node.name}"):
                try:
                    self._api.delete(path)
                except NotFound:
                    pass
                except (Unavailable, ApiError) as error:
                    log.warning("node %s: could not delete %s: %s", node.name, path, error)
            log.info("node %s: deleted", node.name)
