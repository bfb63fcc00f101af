"""The local Kubernetes cluster: lifecycle of the control plane and node agents.

Tests, the demo and the CLI all go through `Cluster`: `up` starts (or attaches
to) the real upstream control plane on this host, `add_nodes` starts one node
agent for a group of fake-GPU nodes, and `down` removes everything, including
what a crashed run left behind. All state lives in the run directory
($DT_RUN), so separate processes (the CLI, test sessions) share one cluster.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from localcluster import binaries, certs, components, kubeconfig, leftovers, netsetup, processes
from localcluster.agent import controls
from localcluster.components import Binaries
from localcluster.layout import REPO_ROOT, RunLayout, venv_dir
from localcluster.nodegroups import NodeGroupRecord, NodeGroupRegistry, agent_pid_name, validate_hostnames
from localcluster.probe import ApiProbe, WaitTimeout, wait_until

log = logging.getLogger(__name__)

APISERVER_READY_TIMEOUT_S = 60.0
DEFAULT_SERVICE_ACCOUNT_TIMEOUT_S = 30.0
COMPONENT_STOP_TIMEOUT_S = 15.0
AGENT_READY_TIMEOUT_S = 90.0
AGENT_STOP_TIMEOUT_S = 60.0
KUBECTL_TIMEOUT_S = 120.0
# The agent looks for run-time requests (kubelet restarts) every 0.5 s.
AGENT_PICKUP_TIMEOUT_S = 10.0
LOG_TAIL_BYTES = 4000

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
KUBELET_PORT = 10250
DEFAULT_SERVICE_ACCOUNT_PATH = "/api/v1/namespaces/default/serviceaccounts/default"

COMPONENT_IDENTITIES = {
    components.CONTROLLER_MANAGER: certs.CONTROLLER_MANAGER,
    components.SCHEDULER: certs.SCHEDULER,
}


class ClusterError(RuntimeError):
    """The cluster cannot be started, attached to or used."""


class ClusterNotRunning(ClusterError):
    """attach() found no running control plane in the run directory."""


class AgentFailed(ClusterError):
    """A node agent exited before its nodes were Ready."""


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
    ) -> Cluster:
        """Start the control plane (or attach to the running one); optionally add nodes.

        `nodes` ({name: GPUs}) becomes one node group, unless a group with exactly
        these nodes is already running, so repeating `up` is harmless; `hostnames`
        as for `add_nodes`. `pull_delays`, when given, replaces the cluster's slow
        image pulls (see `set_pull_delays`).
        """
        _require_root()
        layout = layout or RunLayout.from_env()
        started = time.monotonic()
        layout.make_dirs()
        cluster = cls(layout)
        cluster.binaries()
        with cluster._locked():
            dead_groups = cluster._remove_what_a_killed_run_left()
            cluster._prepare()
            cluster._start_control_plane()
            for group in dead_groups:
                group.stop()  # its Nodes are in etcd still; the apiserver is up to delete them
        log.info("control plane ready in %.1f s (%s)", time.monotonic() - started, layout.root)
        if pull_delays is not None:
            cluster.set_pull_delays(pull_delays)
        if nodes:
            cluster._add_missing_nodes(nodes, labels or {}, gpu_resource, dict(hostnames or {}))
        return cluster

    @classmethod
    def attach(cls, layout: RunLayout | None = None) -> Cluster:
        """A handle on the running cluster; ClusterNotRunning if it is not up."""
        layout = layout or RunLayout.from_env()
        cluster = cls(layout)
        if not cluster.is_up():
            raise ClusterNotRunning(f"no ready cluster in {layout.root}; run `python -m localcluster up`")
        return cluster

    def down(self, purge: bool = False) -> leftovers.Leftovers:
        """Stop agents, then the control plane, then remove whatever is left.

        Returns what the final sweep had to remove (empty when everything
        stopped cleanly). With `purge`, the run directory is deleted too.
        """
        _require_root()
        with self._locked():
            groups = self.node_groups()
            # Agents clean up in parallel; stop() then waits for each in turn.
            for group in groups:
                group.request_stop()
            for group in groups:
                group.stop()
            self._delete_orphan_nodes()
            for name in reversed(components.COMPONENTS):
                self._stop_component(name)
            netsetup.delete_bridge()
            swept = leftovers.remove(self.layout)
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
    ) -> NodeGroup:
        """Start one agent for `spec` ({node name: GPUs}); returns once the nodes are Ready.

        `taints` ("key[=value]:Effect", as kubectl taint takes them) are on every node from
        its registration, like a cloud's GPU node pool (GKE: "nvidia.com/gpu=present:NoSchedule").
        `hostnames` ({node name: hostname}) gives nodes a `kubernetes.io/hostname` label other
        than their name, as on EKS: {"ip-10-0-1-7.ec2.internal": "ip-10-0-1-7"}.
        """
        hostnames = dict(hostnames or {})
        validate_hostnames(spec, hostnames)
        record = NodeGroupRegistry(self.layout).allocate(list(spec))
        group = NodeGroup(self, record)
        try:
            group.start(spec, labels or {}, gpu_resource, tuple(taints), hostnames)
        except BaseException:
            group.stop()
            raise
        return group

    def _add_missing_nodes(self, spec: dict[str, int], labels: dict[str, str], gpu_resource: str,
                           hostnames: dict[str, str]) -> None:
        if any(set(group.names) == set(spec) for group in self.node_groups()):
            log.info("nodes %s are already up", ", ".join(spec))
            return
        self.add_nodes(spec, labels, gpu_resource, hostnames=hostnames)

    def node_groups(self) -> list[NodeGroup]:
        return [NodeGroup(self, record) for record in NodeGroupRegistry(self.layout).records()]

    def node_group(self, node: str) -> NodeGroup:
        """The group whose agent runs `node`; ClusterError if none does."""
        for group in self.node_groups():
            if node in group.names:
                return group
        raise ClusterError(f"no node group runs node {node}")

    # --- roughness: what real clusters do to their nodes ---------------------

    def restart_kubelet(self, node: str, not_ready_s: float = 5.0) -> None:
        """`node` goes through a kubelet restart: see NodeGroup.restart_kubelet."""
        self.node_group(node).restart_kubelet(node, not_ready_s)

    def set_pull_delays(self, delays: Mapping[str, float], nodes: Sequence[str] | None = None) -> None:
        """Pulling each image of `delays` ({image: seconds}, as pods name it) takes that long on a
        node that has not pulled it yet; replaces the delays set before ({} for none).

        On every node by default; with `nodes`, on those alone (over the cluster's delays, an
        image at 0 pulled at once there), so a test slows its own nodes and no one else's.
        """
        if nodes is None:
            controls.write_pull_delays(self.layout.pull_delays_file, delays)
            return
        for node in nodes:
            self.node_group(node).set_pull_delays(delays, [node])

    def forget_images(self, node: str) -> None:
        """`node` forgets the images it pulled: see NodeGroup.forget_images."""
        self.node_group(node).forget_images([node])

    # --- clients -----------------------------------------------------------

    def binaries(self) -> Binaries:
        """The executables, built on first use (so `down` never waits for a build)."""
        if self._binaries is None:
            self._binaries = binaries.ensure()
        return self._binaries

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
                for name in components.COMPONENTS
            ),
            apiserver_ready=ready,
            node_groups=tuple(NodeGroupRegistry(self.layout).records()),
            nodes=tuple(self._node_statuses()) if ready else (),
        )

    # --- internals ---------------------------------------------------------

    def _prepare(self) -> None:
        """PKI, kubeconfigs and the bridge; all idempotent."""
        self._pki = certs.ensure_pki(self.layout.pki)
        self._probe = None  # the PKI may be new (after `down --purge`)
        if not self.kubeconfig.exists():
            kubeconfig.write(self.kubeconfig, kubeconfig.render(self._pki, certs.ADMIN))
        for component, identity in COMPONENT_IDENTITIES.items():
            path = self.layout.component_kubeconfig(component)
            if not path.exists():
                kubeconfig.write(path, kubeconfig.render(self._pki, identity))
        netsetup.ensure_bridge()

    def _remove_what_a_killed_run_left(self) -> list[NodeGroup]:
        """Starting from nothing, first remove what a run killed outright left, and the
        slow image pulls of any earlier run.

        A run killed without `down` (SIGKILL, the end of a CI job or of a sandbox's
        session) leaves network namespaces, veths, mounts, containers and node-group
        records whose agents are dead. Left there, they hold node indices and show up
        as leftovers of the new run. Only when no component and no agent of this run
        directory is alive: a live one means the cluster is up or being stopped, and
        is attached to or left alone. Returns the dead node groups, which still need
        their Nodes deleted once the apiserver is up.
        """
        if any(processes.read_pid(self.layout.pid_file(name)) for name in components.COMPONENTS):
            return []
        groups = self.node_groups()
        if any(group.agent_pid for group in groups):
            return []
        swept = leftovers.remove(self.layout)
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
        self._ensure_running(components.CONTROLLER_MANAGER, components.SCHEDULER)
        wait_until(
            lambda: self.probe().exists(DEFAULT_SERVICE_ACCOUNT_PATH),
            DEFAULT_SERVICE_ACCOUNT_TIMEOUT_S,
            "the default ServiceAccount (controller-manager)",
        )

    def _ensure_running(self, *names: str) -> None:
        for name in names:
            if processes.read_pid(self.layout.pid_file(name)) is None:
                self._start_component(name)

    def _start_component(self, name: str) -> None:
        argv = components.commands(self.layout, self._pki, self.binaries())[name]
        processes.start_detached(
            argv, self.layout.pid_file(name), self.layout.log_file(name), cwd=self.layout.root
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
        """Delete Nodes no agent serves any more (e.g. from an agent killed in an
        earlier run), so they do not linger NotReady in etcd across restarts."""
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
    """One node agent and its nodes; a context manager that stops the agent on exit."""

    def __init__(self, cluster: Cluster, record: NodeGroupRecord):
        self._cluster = cluster
        self.record = record

    @property
    def names(self) -> tuple[str, ...]:
        return self.record.names

    @property
    def state_dir(self) -> Path:
        return self._cluster.layout.agents / self.record.group_id

    @property
    def log_file(self) -> Path:
        return self._cluster.layout.log_file(self._pid_name)

    @property
    def _pid_name(self) -> str:
        return agent_pid_name(self.record.group_id)

    def start(self, spec: dict[str, int], labels: dict[str, str], gpu_resource: str,
              taints: tuple[str, ...] = (), hostnames: Mapping[str, str] | None = None) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        argv = agent_command(self._cluster.layout, self.record, spec, labels, gpu_resource, self.state_dir, taints,
                             hostnames or {})
        env = {**os.environ, "PYTHONPATH": _prepend_path(str(REPO_ROOT), os.environ.get("PYTHONPATH"))}
        pid = processes.start_detached(argv, self.pid_file, self.log_file, cwd=self.state_dir, env=env)
        self._wait_ready(pid)
        log.info("nodes %s are Ready (agent log %s)", ", ".join(self.names), self.log_file)

    def stop(self) -> None:
        """Stop the agent (it deletes its pods' processes and Node objects); idempotent.

        If the agent had died (a fault test may SIGKILL it), what it would have
        cleaned up is removed here instead.
        """
        pid = self.agent_pid
        if pid is not None:
            processes.stop(pid, f"agent {self.record.group_id}", AGENT_STOP_TIMEOUT_S)
        swept = leftovers.remove_node_group(self.state_dir, self.record.indices())
        if not swept.empty():
            log.warning("removed what agent %s left: %s", self.record.group_id, swept)
        self._delete_leftover_nodes()
        self.pid_file.unlink(missing_ok=True)
        NodeGroupRegistry(self._cluster.layout).release(self.record.group_id)

    def restart_kubelet(self, node: str, not_ready_s: float = 5.0) -> None:
        """Play a kubelet restart on `node`: it reports Ready=False (KubeletNotReady, "PLEG is not
        healthy: ...") for `not_ready_s`, then Ready again; its pods' containers run on untouched.

        Returns once the agent has taken the request (the Node shows it within a second).
        """
        self._require_node(node)
        request = controls.request_kubelet_restart(self.state_dir, node, not_ready_s)
        wait_until(lambda: not request.exists(), AGENT_PICKUP_TIMEOUT_S,
                   f"agent {self.record.group_id} to take the kubelet restart of {node}")

    def set_pull_delays(self, delays: Mapping[str, float], nodes: Sequence[str] | None = None) -> None:
        """Slow pulls on these nodes (default: all of the group's), over the cluster's delays:
        {image: seconds}, an image at 0 pulled at once; replaces what was set before for them."""
        for node in self._require_nodes(nodes):
            controls.write_pull_delays(controls.node_pull_delays_file(self.state_dir, node), delays)

    def forget_images(self, nodes: Sequence[str] | None = None) -> None:
        """These nodes (default: all of the group's) forget the images they pulled, so the
        next pod there pulls again, as on a fresh node or after image garbage collection."""
        for node in self._require_nodes(nodes):
            controls.pulled_images_file(self.state_dir, node).unlink(missing_ok=True)

    def _require_nodes(self, nodes: Sequence[str] | None) -> Sequence[str]:
        for node in nodes or ():
            self._require_node(node)
        return self.names if nodes is None else nodes

    def _require_node(self, node: str) -> None:
        if node not in self.names:
            raise ClusterError(f"node {node} is not in node group {self.record.group_id} ({', '.join(self.names)})")

    def request_stop(self) -> None:
        """Ask the agent to stop (SIGTERM) without waiting; stop() waits and cleans up."""
        pid = self.agent_pid
        if pid is not None:
            processes.terminate(pid)

    def __enter__(self) -> NodeGroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def agent_pid(self) -> int | None:
        """The running agent's pid (fault tests kill it), None once it has exited."""
        return processes.read_pid(self.pid_file)

    @property
    def pid_file(self) -> Path:
        return self._cluster.layout.pid_file(self._pid_name)

    def _delete_leftover_nodes(self) -> None:
        probe = self._cluster.probe()
        for name in self.names:
            if probe.exists(f"/api/v1/nodes/{name}"):
                log.warning("deleting Node %s left by agent %s", name, self.record.group_id)
                probe.delete(f"/api/v1/nodes/{name}")

    def _wait_ready(self, pid: int) -> None:
        ready_file = self.state_dir / "ready"
        probe = self._cluster.probe()

        def nodes_ready() -> bool:
            if not processes.alive(pid):
                raise AgentFailed(f"node agent for {', '.join(self.names)} exited:\n{self._log_tail()}")
            return ready_file.exists() and all(probe.node_ready(name) for name in self.names)

        try:
            wait_until(nodes_ready, AGENT_READY_TIMEOUT_S, f"nodes {', '.join(self.names)} to be Ready")
        except WaitTimeout as error:
            raise AgentFailed(f"{error}; agent log:\n{self._log_tail()}") from error

    def _log_tail(self) -> str:
        try:
            with open(self.log_file, "rb") as log_stream:
                log_stream.seek(0, os.SEEK_END)
                log_stream.seek(max(0, log_stream.tell() - LOG_TAIL_BYTES))
                return log_stream.read().decode(errors="replace")
        except FileNotFoundError:
            return "(no log)"


def agent_command(
    layout: RunLayout,
    record: NodeGroupRecord,
    spec: dict[str, int],
    labels: dict[str, str],
    gpu_resource: str,
    state_dir: Path,
    taints: tuple[str, ...] = (),
    hostnames: Mapping[str, str] | None = None,
) -> list[str]:
    """The node agent's command line (contract in localcluster/agent/settings.py)."""
    pki = certs.Pki(layout.pki)
    venv = venv_dir()
    hostnames = hostnames or {}
    argv = [
        str(venv / "bin" / "python"), "-m", "localcluster.agent",
        f"--kubeconfig={layout.kubeconfig}",
        "--nodes=" + ",".join(
            f"{name}/{hostnames[name]}={spec[name]}" if name in hostnames else f"{name}={spec[name]}"
            for name in record.names
        ),
        f"--first-index={record.first_index}",
        f"--gpu-resource={gpu_resource}",
        f"--state-dir={state_dir}",
        f"--bridge={netsetup.BRIDGE_NAME}",
        f"--apiserver-host={netsetup.HOST_IP}",
        f"--apiserver-port={components.APISERVER_PORT}",
        f"--ca-file={pki.ca_cert}",
        f"--kubelet-cert={pki.cert('kubelet')}",
        f"--kubelet-key={pki.key('kubelet')}",
        f"--kubelet-port={KUBELET_PORT}",
        f"--pull-delays-file={layout.pull_delays_file}",
    ]
    if labels:
        argv.append("--labels=" + ",".join(f"{key}={value}" for key, value in labels.items()))
    if taints:
        argv.append("--taints=" + ",".join(taints))
    return argv


def _prepend_path(entry: str, path: str | None) -> str:
    return f"{entry}:{path}" if path else entry


def _require_root() -> None:
    if os.geteuid() != 0:
        raise PermissionError("the local cluster needs root (bridge, network namespaces, mounts)")
