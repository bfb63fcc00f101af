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

import dataclasses
import fcntl
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from localcluster import (
    binaries, certs, components, karpenter, kubeconfig, kueue, leftovers, netsetup, nodeclaims, processes, registry,
    slowpulls, versions,
)
from localcluster.components import Binaries
from localcluster.dra import install as install_dra
from localcluster.layout import PROJECT_ROOT, RunLayout, cache_dir
from localcluster.node import hostchanges, imagecache
from localcluster.node.config import NodePaths, NodeSpec
from localcluster.node.realnode import RealNode
from localcluster.nodegroups import NODE_DAEMONS, NodeGroupRecord, NodeGroupRegistry, validate_hostnames
from localcluster.probe import ApiProbe, wait_until

log = logging.getLogger(__name__)

KUEUE = "kueue"  # optional: started by `up --kueue` or start_kueue, stopped first by `down`
KUEUE_READY_TIMEOUT_S = 60.0
KARPENTER = "karpenter"  # optional: started by `up --karpenter` or start_karpenter, stopped first by `down`
KARPENTER_READY_TIMEOUT_S = 60.0

APISERVER_READY_TIMEOUT_S = 60.0
DEFAULT_SERVICE_ACCOUNT_TIMEOUT_S = 30.0
COMPONENT_STOP_TIMEOUT_S = 15.0
REGISTRY_READY_TIMEOUT_S = 30.0
KUBECTL_TIMEOUT_S = 120.0

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_SERVICE_ACCOUNT_PATH = "/api/v1/namespaces/default/serviceaccounts/default"

COMPONENT_IDENTITIES = {
    components.CONTROLLER_MANAGER: certs.CONTROLLER_MANAGER,
    components.SCHEDULER: certs.SCHEDULER,
}


class ClusterError(RuntimeError):
    """The cluster cannot be started, attached to or used."""


class ClusterNotRunning(ClusterError):
    """attach() found no running control plane in the run directory."""


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
        cluster._choose_version(kubernetes or versions.selected())
        cluster.binaries()
        with cluster._locked():
            dead_groups = cluster._remove_what_a_killed_run_left()
            cluster._prepare()
            cluster._start_control_plane()
            for group in dead_groups:
                group.stop()  # its Nodes are in etcd still; the apiserver is up to delete them
        log.info("control plane ready in %.1f s (%s)", time.monotonic() - started, layout.root)
        published = registry.publish()
        imagecache.refresh(layout, registry.published())
        if published:
            log.info("published %s to the local registry", ", ".join(published))
            for group in cluster.node_groups():
                if group.alive():  # nodes starting later forget replaced images as they start
                    group.forget_replaced_images()
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
            self._delete_orphan_nodes()
            for name in reversed(components.COMPONENTS):
                self._stop_component(name)
            netsetup.delete_bridge()
            swept = leftovers.remove(self.layout)
            hostchanges.restore(self.layout.host_state_file, self.layout.root)
            if not keep_state:
                forget_api_state(self.layout)
            if purge:
                self._purge()
        log.info("cluster in %s is down", self.layout.root)
        return swept

    def is_up(self) -> bool:
        """Whether this run directory's apiserver answers /readyz."""
        return self._pki.ca_cert.exists() and self.probe().ready()

    def restart_apiserver(self, graceful: bool = False) -> None:
        """Kill the apiserver (SIGKILL, like a crash; SIGTERM if `graceful`) and
        start it again with the same flags; returns once it is ready."""
        self._stop_component(components.APISERVER, graceful)
        self._start_component(components.APISERVER)
        wait_until(self.probe().ready, APISERVER_READY_TIMEOUT_S, "the restarted apiserver's /readyz")

    # --- Kueue --------------------------------------------------------------

    def start_kueue(self, every_pod_of: Mapping[str, str] | None = None) -> None:
        """Kueue's CRDs, its controller manager (a host process, like the control plane)
        and then its webhooks; idempotent. Returns once Kueue answers /readyz. With
        `every_pod_of`, see kueue.configuration (a running Kueue keeps its configuration:
        stop it first)."""
        binary = binaries.kueue()
        module = kueue.module_dir(binaries.KUEUE_BUILD_SCRIPT.parent / "go.mod", cache_dir() / "gomod")
        certs.ensure_server(self._pki, kueue.WEBHOOK_CERT, "kueue-webhook", ("127.0.0.1",))
        certs.ensure_server(self._pki, kueue.VISIBILITY_CERT, "kueue-visibility", (netsetup.HOST_IP,),
                            (kueue.visibility_dns_name(),))
        # tls.crt and tls.key in each directory, as controller-runtime and Kueue read them
        cert_dir, visibility_certs = self.layout.root / "kueue-certs", self.layout.root / "kueue-visibility-certs"
        for directory, cert in ((cert_dir, kueue.WEBHOOK_CERT), (visibility_certs, kueue.VISIBILITY_CERT)):
            directory.mkdir(exist_ok=True)
            shutil.copyfile(self._pki.cert(cert), directory / "tls.crt")
            shutil.copyfile(self._pki.key(cert), directory / "tls.key")
        config_file = self.layout.root / "kueue-config.yaml"
        config_file.write_text(yaml.safe_dump(kueue.configuration(cert_dir, every_pod_of)))
        api = self.api_client()
        crds = kueue.install(api, module)
        wait_until(lambda: kueue.established(api, crds), KUEUE_READY_TIMEOUT_S, "Kueue's CRDs to be served")
        etc_overlay = self.layout.root / "kueue-etc"
        metrics_certs = etc_overlay / "upper" / kueue.METRICS_CERT_DIR
        metrics_certs.mkdir(parents=True, exist_ok=True)
        (etc_overlay / "work").mkdir(exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copyfile(cert_dir / name, metrics_certs / name)
        root = self.layout.root / "kueue-root"  # a mount point, inside Kueue's mount namespace only
        root.mkdir(exist_ok=True)
        if processes.read_pid(self.layout.pid_file(KUEUE)) is None:
            processes.start_detached(kueue.command(binary, config_file, self.kubeconfig, root, visibility_certs,
                                                   etc_overlay),
                                     self.layout.pid_file(KUEUE), self.layout.log_file(KUEUE), cwd=self.layout.root,
                                     program=str(binary))
        wait_until(kueue.ready, KUEUE_READY_TIMEOUT_S, "Kueue's /readyz")
        kueue.register_webhooks(api, module, self._pki.ca_cert.read_bytes())
        api_services = kueue.register_visibility(api, module, self._pki.ca_cert.read_bytes())
        wait_until(lambda: kueue.visibility_available(api, api_services), KUEUE_READY_TIMEOUT_S,
                   "Kueue's visibility API to be available")

    def stop_kueue(self) -> None:
        """Its webhooks and APIServices first (the webhooks fail closed: without Kueue no
        pod could be created; see unregister_visibility); then its finalizers, which no one would remove any more, off what still has them."""
        if self.is_up():
            kueue.unregister_webhooks(self.api_client())
            kueue.unregister_visibility(self.api_client())
        self._stop_component(KUEUE)
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
        karpenter.validate_instance_types(types, nodeclaims.HostCapacity.of_this_host())
        binary = binaries.karpenter()
        module = karpenter.module_dir(binaries.KARPENTER_BUILD_SCRIPT.parent / "go.mod", cache_dir() / "gomod")
        api = self.api_client()
        crds = karpenter.install(api, module)
        wait_until(lambda: karpenter.established(api, crds), KARPENTER_READY_TIMEOUT_S,
                   "Karpenter's CRDs to be served")
        if processes.read_pid(self.layout.pid_file(KARPENTER)) is None:
            types_file = self.layout.root / "karpenter-instance-types.json"
            types_file.write_text(json.dumps(types, indent=2) + "\n")
            env = karpenter.environment(self.kubeconfig, types_file, nodeclaims.python_executable(),
                                        _prepend_path(str(PROJECT_ROOT), os.environ.get("PYTHONPATH")),
                                        processes.environment_without_proxy(), repair_toleration_s)
            processes.start_detached([str(binary)], self.layout.pid_file(KARPENTER), self.layout.log_file(KARPENTER),
                                     cwd=self.layout.root, env=env)
        wait_until(karpenter.ready, KARPENTER_READY_TIMEOUT_S, "Karpenter's /readyz")

    def stop_karpenter(self) -> None:
        """Karpenter first (it launches no more nodes), then every node it launched; then its
        NodeClaims and the finalizers no one would remove any more (see karpenter.release)."""
        self._stop_component(KARPENTER)
        terminated = nodeclaims.delete_all(self)
        if terminated:
            log.info("Karpenter stopped: terminated its nodes %s", ", ".join(terminated))
        if self.is_up():
            released = karpenter.release(self.api_client())
            if released:
                log.info("Karpenter stopped: released %s", ", ".join(released))

    def stop_component(self, name: str) -> None:
        """Stop one control-plane component (e.g. the scheduler, to freeze binding in a fault test)."""
        self._stop_component(name, True)

    def start_component(self, name: str) -> None:
        """Start a component stopped by ``stop_component`` again, with the same flags."""
        self._start_component(name)

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
        record = NodeGroupRegistry(self.layout).allocate(list(spec))
        group = NodeGroup(self, record)
        try:
            if dra:
                install_dra(self.kubectl)
            group.start(spec, labels or {}, gpu_resource, tuple(taints), hostnames, ipv6_first, ipv6_only, dra)
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
        current = slowpulls.read_delays(self.layout.pull_delays_file)
        normalized = {slowpulls.normalize(image): seconds for image, seconds in delays.items()}
        if nodes is None:
            current["all"] = normalized
        else:
            for node in nodes:
                current.setdefault("nodes", {})[self.node_group(node).node(node).spec.ip] = normalized
        slowpulls.write_delays(self.layout.pull_delays_file, current)

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

    def status(self) -> ClusterStatus:
        ready = self.is_up()
        return ClusterStatus(
            components=tuple(
                ComponentStatus(name, processes.read_pid(self.layout.pid_file(name)))
                for name in (*components.COMPONENTS, KUEUE, KARPENTER)
            ),
            apiserver_ready=ready,
            node_groups=tuple(NodeGroupRegistry(self.layout).records()),
            nodes=tuple(self._node_statuses()) if ready else (),
        )

    # --- internals ---------------------------------------------------------

    def _prepare(self) -> None:
        """PKI, kubeconfigs, the registry's config and the bridge; all idempotent."""
        self._pki = certs.ensure_pki(self.layout.pki)
        self._probe = None  # the PKI may be new (after `down --purge`)
        # Every node's kube-proxy authenticates with this one.
        certs.ensure_client(self._pki, certs.KUBE_PROXY)
        certs.ensure_client(self._pki, certs.FRONT_PROXY_CLIENT)
        if not self.kubeconfig.exists():
            kubeconfig.write(self.kubeconfig, kubeconfig.render(self._pki, certs.ADMIN))
        for component, identity in COMPONENT_IDENTITIES.items():
            path = self.layout.component_kubeconfig(component)
            if not path.exists():
                kubeconfig.write(path, kubeconfig.render(self._pki, identity))
        registry.write_config(self.layout)
        registry.storage_dir().mkdir(parents=True, exist_ok=True)
        netsetup.ensure_bridge()

    def _choose_version(self, wanted: versions.KubernetesVersion) -> None:
        """Run `wanted`; a control plane already up with another release is an error (a
        cluster from before releases were recorded runs the default)."""
        running = versions.recorded(versions.version_file(self.layout.root)) or versions.parse(versions.DEFAULT)
        if running != wanted and any(processes.read_pid(self.layout.pid_file(name)) for name in components.COMPONENTS):
            raise ClusterError(f"the cluster in {self.layout.root} runs Kubernetes {running}, not {wanted}: "
                               "take it down first (python -m localcluster down)")
        versions.record(versions.version_file(self.layout.root), wanted)

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
        if any(processes.read_pid(self.layout.pid_file(name)) for name in components.COMPONENTS):
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

    def _start_control_plane(self) -> None:
        """Start whichever components are not running, as early as each can start.

        etcd and the apiserver start together (the apiserver retries etcd); the
        controller-manager gives up if the apiserver is not healthy within 10 s,
        so it and the scheduler start once the apiserver is ready.
        """
        self._ensure_running(components.ETCD, components.APISERVER)
        wait_until(self.probe().ready, APISERVER_READY_TIMEOUT_S, "the apiserver's /readyz")
        self._ensure_running(components.CONTROLLER_MANAGER, components.SCHEDULER, components.REGISTRY,
                             components.PULL_PROXY)
        wait_until(
            lambda: self.probe().exists(DEFAULT_SERVICE_ACCOUNT_PATH),
            DEFAULT_SERVICE_ACCOUNT_TIMEOUT_S,
            "the default ServiceAccount (controller-manager)",
        )
        wait_until(registry.pullable, REGISTRY_READY_TIMEOUT_S, "the registry, through the nodes' pull proxy")

    def _ensure_running(self, *names: str) -> None:
        for name in names:
            if processes.read_pid(self.layout.pid_file(name)) is None:
                self._start_component(name)

    def _start_component(self, name: str) -> None:
        argv = components.commands(self.layout, self._pki, self.binaries())[name]
        # The pull proxy is this package's own: python -m localcluster.slowpulls.
        env = {**os.environ, "PYTHONPATH": _prepend_path(str(PROJECT_ROOT), os.environ.get("PYTHONPATH"))}
        processes.start_detached(
            argv, self.layout.pid_file(name), self.layout.log_file(name), cwd=self.layout.root, env=env
        )

    def _stop_component(self, name: str, graceful: bool = True) -> None:
        pid_file = self.layout.pid_file(name)
        pid = processes.read_pid(pid_file)
        if pid is not None and graceful:
            processes.stop(pid, name, COMPONENT_STOP_TIMEOUT_S)
        elif pid is not None:
            processes.kill(pid, name, COMPONENT_STOP_TIMEOUT_S)
        pid_file.unlink(missing_ok=True)

    def _node_statuses(self) -> Iterator[NodeStatus]:
        response = self.probe().get("/api/v1/nodes")
        if response is None or response.status != 200:
            return
        for node in response.json().get("items", []):
            conditions = node.get("status", {}).get("conditions", [])
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            gpus = node.get("status", {}).get("allocatable", {}).get(DEFAULT_GPU_RESOURCE, "0")
            yield NodeStatus(node["metadata"]["name"], ready, gpus)

    def _delete_orphan_nodes(self) -> None:
        """Delete Nodes no kubelet serves any more (e.g. one killed in an earlier run),
        so they do not linger NotReady in etcd across restarts."""
        response = self.probe().get("/api/v1/nodes")
        if response is None or response.status != 200:
            return
        for node in response.json().get("items", []):
            name = node["metadata"]["name"]
            log.warning("deleting orphan Node %s", name)
            self.probe().delete(f"/api/v1/nodes/{name}")

    def _purge(self) -> None:
        # Never delete through a mount: a bind-mounted directory would lose its files.
        remaining = leftovers.mounts_under(self.layout.root)
        if remaining:
            raise ClusterError(f"not purging {self.layout.root}: still mounted: {remaining}")
        log.info("deleting %s", self.layout.root)
        shutil.rmtree(self.layout.root, ignore_errors=True)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise up/down across processes."""
        self.layout.root.mkdir(parents=True, exist_ok=True)
        with open(self.layout.lock_file, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


class NodeGroup:
    """Nodes added together (one `add_nodes`); a context manager that stops them on exit."""

    def __init__(self, cluster: Cluster, record: NodeGroupRecord):
        self._cluster = cluster
        self.record = record

    @property
    def names(self) -> tuple[str, ...]:
        return self.record.names

    def start(self, spec: dict[str, int], labels: dict[str, str], gpu_resource: str,
              taints: tuple[str, ...] = (), hostnames: Mapping[str, str] | None = None,
              ipv6_first: bool = False, ipv6_only: bool = False, dra: bool = False) -> None:
        hostnames = hostnames or {}
        self.start_nodes([NodeSpec(name=name, index=0, gpus=0 if dra else spec[name], gpu_resource=gpu_resource,
                                   hostname=hostnames.get(name, name), labels=labels, taints=taints,
                                   ipv6_first=ipv6_first, ipv6_only=ipv6_only,
                                   dra_gpus=spec[name] if dra else 0)
                          for name in self.names])

    def start_nodes(self, specs: Sequence[NodeSpec]) -> None:
        """Start the group's nodes as `specs` say (one per name; each gets its index in the group)
        and return once they are Ready and advertise their GPUs."""
        if sorted(spec.name for spec in specs) != sorted(self.names):
            raise ClusterError(f"node specs for {[spec.name for spec in specs]}, not the group's {list(self.names)}")
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
        """Stop every node of the group (what a killed one left included) and delete its Nodes."""
        nodes = self.nodes()
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as stops:  # each waits for its daemons to exit
            for stopped in [stops.submit(node.stop) for node in nodes]:
                stopped.result()
        self._delete_leftover_nodes()
        NodeGroupRegistry(self._cluster.layout).release(self.record.group_id)

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
                probe.delete(f"/api/v1/nodes/{name}")


def forget_api_state(layout: RunLayout) -> None:
    """Remove the stopped cluster's objects (RunLayout.api_state), so the next `up` starts
    empty: a last run's pods would otherwise come back, on nodes that no longer exist."""
    for path in layout.api_state:
        mounted = leftovers.mounts_under(path)
        if mounted:  # never delete through a mount
            raise ClusterError(f"not removing {path}: still mounted: {mounted}")
        shutil.rmtree(path, ignore_errors=True)


def _prepend_path(entry: str, path: str | None) -> str:
    return f"{entry}:{path}" if path else entry


def _require_root() -> None:
    if os.geteuid() != 0:
        raise PermissionError("the local cluster needs root (bridge, network namespaces, mounts)")
