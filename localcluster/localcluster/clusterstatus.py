"""What `python -m localcluster status` shows: the components' processes, the apiserver's
readiness, the node groups and the Nodes with their GPUs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from localcluster import components, processes
from localcluster.layout import RunLayout
from localcluster.node.config import DEFAULT_GPU_RESOURCE
from localcluster.nodegroups import NodeGroupRecord, NodeGroupRegistry
from localcluster.probe import ApiProbe


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None


@dataclass(frozen=True)
class NodeStatus:
    name: str
    ready: bool
    gpus: str


@dataclass(frozen=True)
class ClusterStatus:
    components: tuple[ComponentStatus, ...]
    apiserver_ready: bool
    node_groups: tuple[NodeGroupRecord, ...]
    nodes: tuple[NodeStatus, ...]


def status(layout: RunLayout, probe: ApiProbe | None, ready: bool) -> ClusterStatus:
    """The cluster of `layout` now; its Nodes only if the apiserver is `ready` (`probe` then
    reaches it)."""
    return ClusterStatus(
        components=tuple(
            ComponentStatus(name, processes.read_pid(layout.pid_file(name)))
            for name in (*components.COMPONENTS, components.KUEUE, components.KARPENTER)
        ),
        apiserver_ready=ready,
        node_groups=tuple(NodeGroupRegistry(layout).records()),
        nodes=tuple(_node_statuses(probe)) if ready and probe else (),
    )


def _node_statuses(probe: ApiProbe) -> Iterator[NodeStatus]:
    response = probe.get("/api/v1/nodes")
    if response is None or response.status != 200:
        return
    for node in response.json().get("items", []):
        conditions = node.get("status", {}).get("conditions", [])
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        gpus = node.get("status", {}).get("allocatable", {}).get(DEFAULT_GPU_RESOURCE, "0")
        yield NodeStatus(node["metadata"]["name"], ready, gpus)
