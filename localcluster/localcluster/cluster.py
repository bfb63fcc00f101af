"""The local Kubernetes cluster: lifecycle of the control plane, the registry and the nodes.

Tests, the demo and the CLI all go through `Cluster`: `up` starts (or attaches
to) the real upstream control plane and the image registry on this host,
`add_nodes` starts a group of real nodes (kubelet, containerd and kube-proxy
each, with GPUs advertised), and `down` removes everything, including what a
crashed run left behind, and restores what the nodes changed on the host. All
state lives in the run directory ($DT_RUN), so separate processes (the CLI,
test sessions) share one cluster.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from localcluster import (
    binaries, certs, clusterstatus, components, controlplane, grouphandle, hostnetwork, karpenter, kueue,
    leftovers, nodeclaims, registry, slowpulls, versions,
)
from localcluster.components import KARPENTER, KUEUE, Binaries
from localcluster.dra import install as install_dra
from localcluster.errors import ClusterError, ClusterNotRunning
from localcluster.grouphandle import NodeGroup
from localcluster.layout import RunLayout
from localcluster.node import hostchanges, imagecache
from localcluster.node.config import DEFAULT_GPU_RESOURCE, NodeSpec
from localcluster.nodegroups import NodeGroupRegistry, validate_hostnames
from localcluster.probe import ApiProbe, wait_until

log = logging.getLogger(__name__)

KUBECTL_TIMEOUT_S = 120.0


class Cluster:
    """A handle on the cluster of one run directory; holds no state of its own."""

    def __init__(self, layout: RunLayout):
        self.layout = layout
        self._binaries: Binaries | None = None
        self._pki = certs.Pki(layout.pki)
        self._probe: ApiProbe | None = None

    # --- lifecycle ---------------------------------------------------------

    @classmethod
    def up(
        cls,
        nodes: dict[str, int] | None = None,
        labels: dict[str, str] | None = None,
        gpu_resource: str = DEFAULT_GPU_RESOURCE,
        layout: RunLayout | None = None,
        hostnames: Mapping[str, str] | None = None,
        pull_delays: Mapping[str, float] | None = None,
        kueue: bool = False,
        karpenter: bool = False,
        karpenter_boot_delay_s: float | None = None,
        kubernetes: versions.KubernetesVersion | None = None,
        dra: bool = False,
    ) -> Cluster:
        """Start the control plane and the registry (or attach to the running ones), publish
        the images podman built; optionally add nodes.

        `nodes` ({name: GPUs}) becomes one node group, unless a group with exactly
        these nodes is already running, so repeating `up` is harmless; `hostnames`
        as for `add_nodes`. `pull_delays`, when given, replaces the registry's slow
        pulls (see `set_pull_delays`). `kueue` starts Kueue too (`start_kueue`), `karpenter`
        Karpenter (`start_karpenter`, its nodes booting in `karpenter_boot_delay_s`).
        `kubernetes`: the release to run (default: versions.selected()); a cluster up with
        another one is an error. `dra`: the nodes' GPUs are DRA devices (see add_nodes).
        """
        _require_root()
        layout = layout or RunLayout.from_env()
        started = time.monotonic()
        layout.make_dirs()
        cluster = cls(layout)
        controlplane.choose_version(layout, kubernetes or versions.selected())
        cluster.binaries()
        with cluster._locked():
            dead_groups = cluster._remove_what_a_killed_run_left()
            cluster._prepare()
            controlplane.start_all(layout, cluster._pki, cluster.binaries(), cluster.probe())
            for group in dead_groups:
                group.stop()  # its Nodes are in etcd still; the apiserver is up to delete them
        log.info("control plane ready in %.1f s (%s)", time.monotonic() - started, layout.root)
        cluster._publish_images()
        if pull_delays is not None:
            cluster.set_pull_delays(pull_delays)
        if nodes:
            cluster._add_missing_nodes(nodes, labels or {}, gpu_resource, dict(hostnames or {}), dra)
        if kueue:
            cluster.start_kueue()
        if karpenter:
            cluster.start_karpenter(boot_delay_s=karpenter_boot_delay_s)
        return cluster

    @classmethod
    def attach(cls, layout: RunLayout | None = None) -> Cluster:
        """A handle on the running cluster; ClusterNotRunning if it is not up."""
        layout = layout or RunLayout.from_env()
        cluster = cls(layout)
        if not cluster.is_up():
            raise ClusterNotRunning(f"no ready cluster in {layout.root}; run `python -m localcluster up`")
        return cluster

    def down(self, purge: bool = False, keep_state: bool = False) -> leftovers.Leftovers:
        """Stop the nodes, then the control plane, then remove whatever is left and
        restore what the nodes changed on the host.

        Returns what the final sweep had to remove (empty when everything
        stopped cleanly). The API's objects (etcd's data) go too, unless `keep_state`:
        then the next `up` serves them again. With `purge`, the run directory is deleted too.
        """
        _require_root()
        with self._locked():
            self.stop_kueue()
            self.stop_karpenter()
            for group in self.node_groups():
                group.stop()
            grouphandle.delete_orphan_nodes(self.probe())
            for name in reversed(components.COMPONENTS):
                controlplane.stop(self.layout, name)
            hostnetwork.delete_bridge()
            swept = leftovers.remove(self.layout)
            hostchanges.restore(self.layout.host_state_file, self.layout.root)
            if not keep_state:
                leftovers.forget_api_state(self.layout)
            if purge:
                leftovers.purge(self.layout.root)
        log.info("cluster in %s is down", self.layout.root)
        return swept

    def is_up(self) -> bool:
        """Whether this run directory's apiserver answers /readyz."""
        return self._pki.ca_cert.exists() and self.probe().ready()

    def restart_apiserver(self, graceful: bool = False) -> None:
        """Kill the apiserver (SIGKILL, like a crash; SIGTERM if `graceful`) and
        start it again with the same flags; returns once it is ready."""
        controlplane.stop(self.layout, components.APISERVER, graceful)
        controlplane.start(self.layout, self._pki, self.binaries(), components.APISERVER)
        wait_until(self.probe().ready, controlplane.APISERVER_READY_TIMEOUT_S, "the restarted apiserver's /readyz")

    # --- Kueue --------------------------------------------------------------

    def start_kueue(self, every_pod_of: Mapping[str, str] | None = None) -> None:
        """Kueue's CRDs, its controller manager (a host process, like the control plane)
        and then its webhooks; idempotent. Returns once Kueue answers /readyz. With
        `every_pod_of`, see kueue.configuration (a running Kueue keeps its configuration:
        stop it first)."""
        kueue.start(self.layout, self._pki, self.api_client(), every_pod_of)

    def stop_kueue(self) -> None:
        """Its webhooks and APIServices first (the webhooks fail closed: without Kueue no
        pod could be created; see unregister_visibility); then its finalizers, which no one
        would remove any more, off what still has them."""
        if self.is_up():
            kueue.unregister_webhooks(self.api_client())
            kueue.unregister_visibility(self.api_client())
        controlplane.stop(self.layout, KUEUE)
        if self.is_up():
            released = kueue.release_finalizers(self.api_client())
            if released:
                log.info("Kueue stopped: released its finalizers from %s", ", ".join(released))

    # --- Karpenter ------------------------------------------------------------

    def start_karpenter(self, instance_types: Sequence[Mapping] | None = None,
                        boot_delay_s: float | None = None, repair_toleration_s: float | None = None) -> None:
        """Karpenter's CRDs and its controller (a host process, like the control plane), with the
        local cloud provider: a real node per NodeClaim. Idempotent: a running Karpenter keeps
        its settings (stop it first). `instance_types` in kwok's format, each with a
        `bootDelay` (default: karpenter.instance_types(boot_delay_s)); `repair_toleration_s`,
        how long a node may be NotReady before node repair replaces it (default 10 minutes).
        Returns once Karpenter answers /readyz."""
        types = list(instance_types) if instance_types is not None else karpenter.instance_types(
            karpenter.DEFAULT_BOOT_DELAY_S if boot_delay_s is None else boot_delay_s)
        karpenter.start(self.layout, self.api_client(), types, repair_toleration_s)

    def stop_karpenter(self) -> None:
        """Karpenter first (it launches no more nodes), then every node it launched; then its
        NodeClaims and the finalizers no one would remove any more (see karpenter.release)."""
        controlplane.stop(self.layout, KARPENTER)
        terminated = nodeclaims.delete_all(self)
        if terminated:
            log.info("Karpenter stopped: terminated its nodes %s", ", ".join(terminated))
        if self.is_up():
            released = karpenter.release(self.api_client())
            if released:
                log.info("Karpenter stopped: released %s", ", ".join(released))

    def stop_component(self, name: str) -> None:
        """Stop one control-plane component (e.g. the scheduler, to freeze binding in a fault test)."""
        controlplane.stop(self.layout, name, True)

    def start_component(self, name: str) -> None:
        """Start a component stopped by ``stop_component`` again, with the same flags."""
        controlplane.start(self.layout, self._pki, self.binaries(), name)

    # --- nodes -------------------------------------------------------------

    def add_nodes(
        self,
        spec: dict[str, int],
        labels: dict[str, str] | None = None,
        gpu_resource: str = DEFAULT_GPU_RESOURCE,
        taints: Sequence[str] = (),
        hostnames: Mapping[str, str] | None = None,
        ipv6_first: bool = False,
        ipv6_only: bool = False,
        dra: bool = False,
    ) -> NodeGroup:
        """Start a real node for each of `spec` ({node name: GPUs}); returns once they are Ready
        and advertise their GPUs.

        `taints` ("key[=value]:Effect", as kubectl taint takes them) are on every node from
        its registration, like a cloud's GPU node pool (GKE: "nvidia.com/gpu=present:NoSchedule").
        `hostnames` ({node name: hostname}) gives nodes a `kubernetes.io/hostname` label other
        than their name, as on EKS: {"ip-10-0-1-7.ec2.internal": "ip-10-0-1-7"}.
        `ipv6_first`: their pods are dual-stack, IPv6 first; `ipv6_only`: IPv6 alone (see NodeSpec).
        `dra`: their GPUs are devices of DeviceClass gpu.example.com that the example DRA driver
        publishes (localcluster/dra.py), not `gpu_resource`; other groups may keep the extended resource.
        """
        hostnames = dict(hostnames or {})
        validate_hostnames(spec, hostnames)
        return self._start_group([
            NodeSpec(name=name, index=0, gpus=0 if dra else gpus, gpu_resource=gpu_resource,
                     hostname=hostnames.get(name, name), labels=labels or {}, taints=tuple(taints),
                     ipv6_first=ipv6_first, ipv6_only=ipv6_only, dra_gpus=gpus if dra else 0)
            for name, gpus in spec.items()], dra)

    def add_node_specs(self, specs: Sequence[NodeSpec]) -> NodeGroup:
        """Start a node group of `specs` (each node as its own spec says, e.g. profiles.node_specs),
        as add_nodes does; returns once they are Ready and advertise their GPUs."""
        validate_hostnames({spec.name: spec.gpus for spec in specs},
                           {spec.name: spec.hostname for spec in specs if spec.hostname != spec.name})
        return self._start_group(specs)

    def _start_group(self, specs: Sequence[NodeSpec], dra: bool = False) -> NodeGroup:
        group = NodeGroup(self, NodeGroupRegistry(self.layout).allocate([spec.name for spec in specs]))
        try:
            if dra:
                install_dra(self.kubectl)
            group.start_nodes(specs)
        except BaseException:
            group.stop()
            raise
        return group

    def _add_missing_nodes(self, spec: dict[str, int], labels: dict[str, str], gpu_resource: str,
                           hostnames: dict[str, str], dra: bool = False) -> None:
        if any(set(group.names) == set(spec) for group in self.node_groups()):
            log.info("nodes %s are already up", ", ".join(spec))
            return
        self.add_nodes(spec, labels, gpu_resource, hostnames=hostnames, dra=dra)

    def node_groups(self) -> list[NodeGroup]:
        return [NodeGroup(self, record) for record in NodeGroupRegistry(self.layout).records()]

    def node_group(self, node: str) -> NodeGroup:
        """The group `node` belongs to; ClusterError if none has it."""
        for group in self.node_groups():
            if node in group.names:
                return group
        raise ClusterError(f"no node group runs node {node}")

    # --- roughness: what real clusters do to their nodes ---------------------

    def restart_kubelet(self, node: str, down_s: float = 0.0) -> None:
        """Kill `node`'s kubelet and start it again after `down_s`: see RealNode.restart_kubelet."""
        self.node_group(node).restart_kubelet(node, down_s)

    def restart_containerd(self, node: str, down_s: float = 0.0, until: Callable[[], bool] | None = None) -> None:
        """`node`'s container runtime restarts: see RealNode.restart_containerd."""
        self.node_group(node).restart_containerd(node, down_s, until)

    def set_pull_delays(self, delays: Mapping[str, float], nodes: Sequence[str] | None = None) -> None:
        """Pulling each image of `delays` ({image: seconds}, as pods name it) takes that long on a
        node that has not pulled it yet; replaces the delays set before ({} for none).

        On every node by default; with `nodes`, on those alone (over the cluster's delays, an
        image at 0 pulled at once there), so a test slows its own nodes and no one else's.
        """
        ips = None if nodes is None else [self.node_group(node).node(node).spec.ip for node in nodes]
        slowpulls.set_delays(self.layout.pull_delays_file, delays, ips)

    def forget_images(self, node: str) -> None:
        """`node` forgets the images it pulled: see NodeGroup.forget_images."""
        self.node_group(node).forget_images([node])

    # --- clients -----------------------------------------------------------

    def binaries(self) -> Binaries:
        """The executables, built on first use (so `down` never waits for a build)."""
        if self._binaries is None:
            self._binaries = binaries.ensure(self.version())
        return self._binaries

    def version(self) -> versions.KubernetesVersion:
        """The Kubernetes release this cluster runs (or, not started yet, would)."""
        return versions.recorded(versions.version_file(self.layout.root)) or versions.selected()

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    def api_client(self):
        """A kubernetes.client.ApiClient authenticated as the cluster admin."""
        from kubernetes import config  # slow import, only for callers that want the client

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def kubectl(self, *args: str, check: bool = False, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl as the admin; output captured as text."""
        argv = [str(self.binaries().kubernetes("kubectl")), f"--kubeconfig={self.kubeconfig}", *args]
        return subprocess.run(
            argv, capture_output=True, text=True, check=check, input=input, timeout=KUBECTL_TIMEOUT_S
        )

    def probe(self) -> ApiProbe:
        if self._probe is None:
            self._probe = ApiProbe(self._pki, components.APISERVER_PORT)
        return self._probe

    def status(self) -> clusterstatus.ClusterStatus:
        """Also of a run directory where no cluster ever started (no CA to reach one with)."""
        up = self.is_up()
        return clusterstatus.status(self.layout, self.probe() if up else None, up)

    # --- internals ---------------------------------------------------------

    def _prepare(self) -> None:
        """The control plane's PKI, kubeconfigs and registry config, and the bridge; all idempotent."""
        self._pki = controlplane.prepare(self.layout)
        self._probe = None  # the PKI may be new (after `down --purge`)
        hostnetwork.ensure_bridge()

    def _publish_images(self) -> None:
        """Publish the images podman built; running nodes forget the ones replaced."""
        published = registry.publish()
        imagecache.refresh(self.layout, registry.published())
        if published:
            log.info("published %s to the local registry", ", ".join(published))
            for group in self.node_groups():
                if group.alive():  # nodes starting later forget replaced images as they start
                    group.forget_replaced_images()

    def _remove_what_a_killed_run_left(self) -> list[NodeGroup]:
        """Starting from nothing, first remove what a run killed outright left, and the
        slow image pulls of any earlier run.

        A run killed without `down` (SIGKILL, the end of a CI job or of a sandbox's
        session) leaves nodes' processes and cgroups, network namespaces, veths, mounts
        and node-group records. Left there, they hold node indices and show up as
        leftovers of the new run. Only when no component and no node daemon of this run
        directory is alive: a live one means the cluster is up or being stopped, and
        is attached to or left alone. Returns the dead node groups, which still need
        their Nodes deleted once the apiserver is up.
        """
        if controlplane.any_running(self.layout):
            return []
        groups = self.node_groups()
        if any(group.alive() for group in groups):
            return []
        swept = leftovers.remove(self.layout)
        shutil.rmtree(self.layout.karpenter_instances, ignore_errors=True)  # the dead Karpenter's cloud
        # A new cluster pulls at full speed: slow pulls set for an earlier run (perhaps by
        # another version of this code, in another form) are not this run's.
        self.layout.pull_delays_file.unlink(missing_ok=True)
        if not swept.empty() or groups:
            log.warning("removed what a killed earlier run left: %s; node groups %s", swept,
                        ", ".join(group.record.group_id for group in groups) or "none")
        return groups

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise up/down across processes."""
        self.layout.root.mkdir(parents=True, exist_ok=True)
        with open(self.layout.lock_file, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


def _require_root() -> None:
    if os.geteuid() != 0:
        raise PermissionError("the local cluster needs root (bridge, network namespaces, mounts)")
