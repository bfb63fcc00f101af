"""The handle on a node group's running nodes (one `Cluster.add_nodes`): start them together,
stop them, restart their daemons; the group's record (names, indices) is `nodegroups`'.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from localcluster import registry
from localcluster.components import Binaries
from localcluster.errors import ClusterError
from localcluster.layout import RunLayout, cache_dir
from localcluster.node.config import DEFAULT_GPU_RESOURCE, NodePaths, NodeSpec
from localcluster.node.realnode import RealNode
from localcluster.nodegroups import NODE_DAEMONS, NodeGroupRecord, NodeGroupRegistry
from localcluster.probe import ApiProbe

log = logging.getLogger(__name__)


class NodeHost(Protocol):
    """What a node group needs of its cluster (`Cluster`)."""

    layout: RunLayout

    def binaries(self) -> Binaries: ...

    def probe(self) -> ApiProbe: ...


class NodeGroup:
    """Nodes added together (one `add_nodes`); a context manager that stops them on exit."""

    def __init__(self, cluster: NodeHost, record: NodeGroupRecord):
        self._cluster = cluster
        self.record = record

    @property
    def names(self) -> tuple[str, ...]:
        return self.record.names

    def start_nodes(self, specs: Sequence[NodeSpec]) -> None:
        """Start the group's nodes as `specs` say (one per name; each gets its index in the group)
        and return once they are Ready and advertise their GPUs."""
        if sorted(spec.name for spec in specs) != sorted(self.names):
            raise ClusterError(f"node specs for {[spec.name for spec in specs]}, not the group's {list(self.names)}")
        if not NodeGroupRegistry(self._cluster.layout).hold(self.record.group_id):
            raise ClusterError(f"node group {self.record.group_id} was reclaimed before its nodes started")
        indices = dict(zip(self.names, self.record.indices()))
        nodes = [self._node(dataclasses.replace(spec, index=indices[spec.name])) for spec in specs]
        for node in nodes:
            node.launch()
        # Registration and the node lifecycle controller's first passes take seconds a node:
        # the group's nodes go through them together.
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as waits:
            for waited in [waits.submit(node.become_ready) for node in nodes]:
                waited.result()
        log.info("nodes %s are Ready", ", ".join(self.names))

    def stop(self) -> None:
        """Stop every node of the group (what a killed one left included) and delete its Nodes.
        A group reclaimed meanwhile (its daemons all dead, no one holding it) is left alone:
        its indices, which name the nodes' files, may be another group's by now."""
        groups = NodeGroupRegistry(self._cluster.layout)
        if not groups.hold(self.record.group_id):
            log.warning("node group %s was reclaimed: its nodes are gone", self.record.group_id)
            self._delete_leftover_nodes()
            return
        nodes = self.nodes()
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as stops:  # each waits for its daemons to exit
            for stopped in [stops.submit(node.stop) for node in nodes]:
                stopped.result()
        self._delete_leftover_nodes()
        groups.release(self.record.group_id)

    def nodes(self) -> list[RealNode]:
        return [self.node(name) for name in self.names]

    def node(self, name: str) -> RealNode:
        """A handle on a running node (its spec is what stop and restarts need)."""
        self._require_node(name)
        index = self.record.indices()[self.names.index(name)]
        return self._node(NodeSpec(name=name, index=index, gpus=0, gpu_resource=DEFAULT_GPU_RESOURCE, hostname=name))

    def restart_kubelet(self, node: str, down_s: float = 0.0) -> None:
        """Kill `node`'s kubelet and start it again after `down_s`: see RealNode.restart_kubelet."""
        self.node(node).restart_kubelet(down_s)

    def restart_containerd(self, node: str, down_s: float = 0.0, until: Callable[[], bool] | None = None) -> None:
        """Kill `node`'s containerd and start it again after `down_s` and `until`: see RealNode.restart_containerd."""
        self.node(node).restart_containerd(down_s, until)

    def forget_images(self, nodes: Sequence[str] | None = None) -> None:
        """These nodes (default: all of the group's) forget the images they pulled, so the
        next pod there pulls again, as on a fresh node or after image garbage collection."""
        for name in nodes or self.names:
            self.node(name).forget_images()

    def forget_replaced_images(self) -> None:
        """The group's nodes untag images the registry has replaced: see RealNode.forget_replaced_images."""
        for node in self.nodes():
            node.forget_replaced_images()

    def kubelet_pid(self, node: str) -> int | None:
        """The running kubelet's pid (fault tests stop or kill it), None once it has exited."""
        return self.node(node).daemon_pid("kubelet")

    def daemon_pids(self) -> list[int]:
        """The pids of the group's running kubelets, containerds and kube-proxies."""
        pids = (node.daemon_pid(daemon) for node in self.nodes() for daemon in NODE_DAEMONS)
        return [pid for pid in pids if pid is not None]

    def alive(self) -> bool:
        """Whether any daemon of the group's nodes runs."""
        return bool(self.daemon_pids())

    def __enter__(self) -> NodeGroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _node(self, spec: NodeSpec) -> RealNode:
        cluster = self._cluster
        paths = NodePaths(root=cluster.layout.node_dir(spec.index),
                          image_store=cache_dir() / "node-images" / f"n{spec.index}")
        return RealNode(spec, paths, cluster.layout, cluster.binaries(), registry.mirror(), cluster.probe())

    def _require_node(self, node: str) -> None:
        if node not in self.names:
            raise ClusterError(f"node {node} is not in node group {self.record.group_id} ({', '.join(self.names)})")

    def _delete_leftover_nodes(self) -> None:
        probe = self._cluster.probe()
        for name in self.names:
            if probe.exists(f"/api/v1/nodes/{name}"):
                log.info("deleting Node %s", name)
                delete_node(probe, name)


def delete_node(probe: ApiProbe, name: str) -> None:
    """The Node and its kubelet's Lease: the garbage collector deletes the Lease (the Node
    owns it) only some time later, seconds on a loaded host, and a stopped node is to have
    left nothing in the API once its stop returns."""
    probe.delete(f"/api/v1/nodes/{name}")
    probe.delete(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")


def delete_orphan_nodes(probe: ApiProbe) -> None:
    """Delete Nodes no kubelet serves any more (e.g. one killed in an earlier run),
    so they do not linger NotReady in etcd across restarts."""
    response = probe.get("/api/v1/nodes")
    if response is None or response.status != 200:
        return
    for node in response.json().get("items", []):
        name = node["metadata"]["name"]
        log.warning("deleting orphan Node %s", name)
        delete_node(probe, name)
