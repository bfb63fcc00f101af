"""One real node's life: containerd, the kubelet and kube-proxy in the node's netns and cgroup.

`start` returns once the node is Ready, schedulable (the node lifecycle controller has
lifted its not-ready taint) and advertises its GPUs. `stop` is the machine going away:
its daemons are stopped, then whatever still runs in its cgroup tree (containers,
containerd's shims) is killed, its mounts, netns and cgroups removed. `stop` also
removes what a killed run left of a node of the same index.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localcluster import certs, dra, kubeconfig, leftovers, netsetup, processes, registry
from localcluster.components import APISERVER_PORT, Binaries
from localcluster.layout import RunLayout
from localcluster.nodegroups import NODE_DAEMONS as DAEMONS
from localcluster.nodegroups import daemon_pid_name
from localcluster.node import cgroups, config, containerdconfig, hostchanges, imagecache, network
from localcluster.node.config import Mirror, NodePaths, NodeSpec
from localcluster.probe import ApiProbe, WaitTimeout, wait_until

log = logging.getLogger(__name__)

CONTAINERD = Path("/usr/bin/containerd")
CTR = Path("/usr/bin/ctr")
CONTAINERD_READY_TIMEOUT_S = 30.0
CRI_STARTED = b"Start streaming server"
NODE_READY_TIMEOUT_S = 60.0
DAEMON_STOP_TIMEOUT_S = 15.0
CTR_TIMEOUT_S = 60.0
LOG_TAIL_BYTES = 3000
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
# Start-up races a kubelet of this host can lose, by what it logs as it exits; one that lost
# starts again (at most START_RACE_RESTARTS_MAX times):
# - every kubelet of the host listens on the one /var/lib/kubelet/device-plugins/kubelet.sock
#   (a path compiled into the kubelet, not under its --root-dir): each removes the sockets
#   there, then binds its own, and two starting together can meet between the two steps: the
#   later bind fails and that kubelet exits. No device plugin serves these nodes (GPUs are in
#   the Node's status), so no kubelet needs that socket;
# - its first image garbage collection, asking cadvisor for its root's filesystem before
#   cadvisor has listed it, can panic in GetFsInfo ("index out of range"): seen once in some
#   forty `make test` runs, as a test's node pool started.
START_RACES_LOST = ("device-plugins/kubelet.sock: bind: address already in use",
                    "github.com/google/cadvisor/manager.(*manager).GetFsInfo")
START_RACE_RESTARTS_MAX = 3


def lost_a_start_race(kubelet_log_tail: str) -> bool:
    return any(race in kubelet_log_tail for race in START_RACES_LOST)


class NodeFailed(RuntimeError):
    """A node's daemon exited, or the node did not become Ready in time."""


@dataclass(frozen=True)
class RealNode:
    spec: NodeSpec
    paths: NodePaths
    layout: RunLayout
    binaries: Binaries
    mirror: Mirror
    probe: ApiProbe

    # --- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        """Bring the node up from nothing (after sweeping what an earlier one left)."""
        self.launch()
        self.become_ready()

    def launch(self) -> None:
        """Start the node's daemons from nothing (after sweeping what an earlier one left);
        `become_ready` waits for the rest, so the nodes of a group can wait together."""
        self.stop()
        hostchanges.record(self.layout.host_state_file)
        hostchanges.raise_inotify_limits()
        cgroups.create(self.spec.cgroup)
        network.create(self.spec)
        imagecache.prepare(self.paths.image_store)
        self._write_files()
        containerd = dra.containerd() if self.spec.dra_gpus else CONTAINERD
        self._start_containerd(containerdconfig.containerd_command(containerd, self.paths))
        self.forget_replaced_images()
        self._start_daemon("kubelet", config.kubelet_command(self.binaries.kubernetes("kubelet"), self.spec, self.paths))
        self._start_daemon("kube-proxy", config.kube_proxy_command(self.binaries.kubernetes("kube-proxy"), self.paths))
        if self.spec.dra_gpus:
            dra.start_plugin(self.spec, self.paths, self.layout.pki, self.log_file(dra.DAEMON))

    def become_ready(self) -> None:
        """Return once the launched node is Ready, advertises its GPUs and is schedulable."""
        self._wait(self._registered_and_ready, "to be Ready")
        self._advertise_gpus()
        self._wait(self._schedulable, f"to advertise {self.spec.gpus} {self.spec.gpu_resource} and be schedulable")
        if self.spec.dra_gpus:
            dra.wait_published(self.probe, self.spec, self.paths, self.log_file(dra.DAEMON))

    def stop(self) -> None:
        """Stop the daemons, kill everything left in the node's cgroup, remove its netns,
        mounts, cgroups and run-time files. Idempotent; the Node object is the caller's."""
        for daemon in reversed(DAEMONS):
            pid = self.daemon_pid(daemon)
            if pid is not None:
                processes.stop(pid, f"{daemon} of {self.spec.name}", DAEMON_STOP_TIMEOUT_S)
            self._pid_file(daemon).unlink(missing_ok=True)
        if cgroups.exists(self.spec.cgroup):
            cgroups.empty(self.spec.cgroup)
        for mount_point in sorted(leftovers.mounts_under(self.paths.root), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount_point], check=False)
        network.remove(self.spec)
        if cgroups.exists(self.spec.cgroup):
            cgroups.remove(self.spec.cgroup)
        # The trailing "-" keeps dt-n1 from matching dt-n12's entries.
        hostchanges.remove_entries(self.paths.root, f"{config.network_name(self.spec)}-")
        hostchanges.remove_dead_shim_sockets()
        shutil.rmtree(self.paths.root, ignore_errors=True)

    def restart_kubelet(self, down_s: float = 0.0) -> None:
        """Kill the kubelet (SIGKILL, as a crash or an OOM kill would) and start it again after
        `down_s`; its pods run on meanwhile. Returns once the node is Ready again."""
        self._restart("kubelet", down_s)

    def restart_containerd(self, down_s: float = 0.0, until: Callable[[], bool] | None = None) -> None:
        """Kill containerd and start it again after `down_s` (and, with `until`, once it holds),
        as an upgrade or a crash would: the containers run on under their shims, and the
        kubelet reports the node not Ready ("container runtime is down") until containerd
        answers again."""
        self._restart("containerd", down_s, until)

    def _restart(self, daemon: str, down_s: float, until: Callable[[], bool] | None = None) -> None:
        pid = self.daemon_pid(daemon)
        if pid is not None:
            processes.kill(pid, f"{daemon} of {self.spec.name}", DAEMON_STOP_TIMEOUT_S)
        time.sleep(down_s)
        if until is not None:
            wait_until(until, NODE_READY_TIMEOUT_S, f"what node {self.spec.name}'s {daemon} stays down for")
        started = datetime.datetime.now(datetime.timezone.utc)
        # As first started: a handle on a running node does not know its labels and taints.
        argv = json.loads((self.paths.root / f"{daemon}.argv").read_text())
        if daemon == "containerd":
            self._start_containerd(argv)
        else:
            self._start_daemon(daemon, argv)
        if daemon == "kubelet":
            # Ready is the old kubelet's word until the new one has renewed the node's Lease.
            self._wait(lambda: self._lease_renewed_since(started), "to have its kubelet back")
        self._wait(self._registered_and_ready, f"to be Ready after its {daemon} restart")

    def _lease_renewed_since(self, moment: datetime.datetime) -> bool:
        response = self.probe.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.spec.name}")
        if response is None or response.status != 200:
            return False
        renewed = response.json().get("spec", {}).get("renewTime")
        return renewed is not None and datetime.datetime.fromisoformat(renewed.replace("Z", "+00:00")) >= moment

    def _start_containerd(self, argv: list[str]) -> None:
        """Start containerd; return once its CRI service answers. The socket comes first: the
        CRI plugin then recovers its state (longer the more images the node keeps), and a
        kubelet asking meanwhile exits ("server is not initialized yet")."""
        log_file = self.log_file("containerd")
        offset = log_file.stat().st_size if log_file.exists() else 0
        self._start_daemon("containerd", argv)

        def cri_serving() -> bool:
            if not self._daemon_alive("containerd"):
                raise NodeFailed(f"containerd of node {self.spec.name} exited:\n{self._log_tail('containerd')}")
            with open(log_file, "rb") as stream:
                stream.seek(offset)
                # containerd 1.6's CRI service logs this last, then marks itself initialized.
                return self.paths.containerd_socket.exists() and CRI_STARTED in stream.read()

        wait_until(cri_serving, CONTAINERD_READY_TIMEOUT_S, f"node {self.spec.name}'s containerd CRI service")

    def forget_replaced_images(self) -> None:
        """Untag each image whose tag the registry now gives another image, so the node pulls
        the new one. A node's image store outlives the node (pulls are slow), and the images
        of this project are rebuilt under the same tag; with IfNotPresent a kept tag would run
        the old build. Tags the registry lacks, or cannot tell about, are kept."""
        listed = self._ctr("images", "list").splitlines()[1:]
        replaced = []
        for line in listed:
            reference, _, digest = (line.split() + ["", "", ""])[:3]
            current = registry.digest_of(reference)
            if current is not None and current != digest:
                replaced.append(reference)
        if replaced:
            log.info("node %s: forgetting images rebuilt since it pulled them: %s", self.spec.name, ", ".join(replaced))
            self._ctr("images", "remove", *replaced)

    def forget_images(self) -> None:
        """Remove the node's images but the sandbox's, as image garbage collection does, so the
        next pod that needs one pulls it again (running containers keep their snapshots)."""
        names = self._ctr("images", "list", "--quiet").split()
        doomed = [name for name in names if name != config.SANDBOX_IMAGE and not name.startswith("sha256:")
                  and not name.endswith(f"@{config.SANDBOX_IMAGE}")]
        if doomed:
            self._ctr("images", "remove", *doomed)
        imagecache.mark_for_reseeding(self.paths.image_store)

    def daemon_pid(self, daemon: str) -> int | None:
        return processes.read_pid(self._pid_file(daemon))

    def log_file(self, daemon: str) -> Path:
        return self.layout.log_file(f"{self.spec.name}-{daemon}")

    # --- internals -----------------------------------------------------------

    def _write_files(self) -> None:
        paths = self.paths
        for directory in (paths.root, paths.image_store, paths.containerd_state, paths.runc_root,
                          paths.cni_config_dir, paths.cni_ipam_dir, paths.kubelet_root, paths.pod_logs):
            directory.mkdir(parents=True, exist_ok=True)
        paths.containerd_config.write_text(containerdconfig.containerd_config(paths, cdi=bool(self.spec.dra_gpus)))
        for mirrored, hosts in containerdconfig.registry_hosts(self.mirror).items():
            (paths.registry_hosts / mirrored).mkdir(parents=True, exist_ok=True)
            (paths.registry_hosts / mirrored / "hosts.toml").write_text(hosts)
        _write_json(paths.cni_config_dir / "10-bridge.conflist", config.cni_config(self.spec, paths))
        if self.spec.ipv6_only:
            _write_json(paths.cni_config_dir / "20-egress.conflist", config.egress_cni_config(self.spec, paths))
        pki = certs.Pki(self.layout.pki)
        _write_json(paths.kubelet_config, config.kubelet_config(self.spec, paths, pki))
        identity = certs.node_identity(self.spec.name)
        certs.ensure_client(pki, identity)
        kubeconfig.write(paths.kubeconfig, kubeconfig.render(pki, identity, _apiserver_url()))
        kubeconfig.write(paths.kube_proxy_kubeconfig, kubeconfig.render(pki, certs.KUBE_PROXY, _apiserver_url()))
        _write_json(paths.kube_proxy_config, config.kube_proxy_config(self.spec, paths))

    def _start_daemon(self, daemon: str, argv: list[str]) -> None:
        """Start `argv` inside the node's netns and move it into the node's cgroup before it
        can start anything (the kubelet and containerd fork nothing at start-up).

        containerd also gets a UTS namespace with the node's hostname: hostNetwork pods share
        it, and see their machine's hostname (the hostname label), as on a real node.
        """
        entered = ["nsenter", f"--net={network.netns_path(self.spec)}", "--", *argv]
        if daemon == "containerd":
            entered = ["unshare", "--uts", "--", "sh", "-c", 'hostname "$1" && shift && exec "$@"', "sh",
                       self._hostname(), *entered]
        (self.paths.root / f"{daemon}.argv").write_text(json.dumps(argv))
        env = processes.environment_without_proxy()
        if daemon == "containerd":  # its runc shim is the one beside it (a DRA node's is not Debian's)
            env["PATH"] = f"{Path(argv[0]).parent}:{env.get('PATH', os.defpath)}"
        pid = processes.start_detached(entered, self._pid_file(daemon), self.log_file(daemon),
                                       cwd=self.paths.root, env=env, program=argv[0])
        cgroups.join_daemons(self.spec.cgroup, pid)

    def _hostname(self) -> str:
        """The spec's; on a restart, as first started (a handle only knows the node's name)."""
        saved = self.paths.root / "hostname"
        if saved.exists():
            return saved.read_text()
        saved.write_text(self.spec.hostname)
        return self.spec.hostname

    def _wait(self, condition, what: str) -> None:
        def checked() -> bool:
            for daemon in DAEMONS:
                if not self._daemon_alive(daemon) and not (daemon == "kubelet" and self._restarted_after_start_race()):
                    raise NodeFailed(f"{daemon} of node {self.spec.name} exited:\n{self._log_tail(daemon)}")
            return condition()

        try:
            wait_until(checked, NODE_READY_TIMEOUT_S, f"node {self.spec.name} {what}")
        except WaitTimeout as error:
            raise NodeFailed(f"{error}; kubelet log:\n{self._log_tail('kubelet')}") from error

    def _restarted_after_start_race(self) -> bool:
        """The kubelet started again if it exited having lost a start-up race
        (``START_RACES_LOST``), at most ``START_RACE_RESTARTS_MAX`` times."""
        restarts = self.paths.root / "kubelet.start-race-restarts"
        count = int(restarts.read_text()) if restarts.exists() else 0
        if count >= START_RACE_RESTARTS_MAX or not lost_a_start_race(self._log_tail("kubelet")):
            return False
        restarts.write_text(str(count + 1))
        log.info("the kubelet of node %s lost a start-up race; starting it again", self.spec.name)
        self._start_daemon("kubelet", json.loads((self.paths.root / "kubelet.argv").read_text()))
        return True

    def _registered_and_ready(self) -> bool:
        return self.probe.node_ready(self.spec.name)

    def _schedulable(self) -> bool:
        node = self.probe.node(self.spec.name) or {}
        allocatable = node.get("status", {}).get("allocatable", {})
        taints = node.get("spec", {}).get("taints", [])
        return (allocatable.get(self.spec.gpu_resource, "0") == str(self.spec.gpus)
                and not any(taint.get("key") == NOT_READY_TAINT for taint in taints))

    def _advertise_gpus(self) -> None:
        """GPUs as extended resources in the Node's status capacity, the documented way to
        advertise a resource no device plugin serves. The kubelet copies capacity into
        allocatable at its next status update, up to 10 s later (nodeStatusUpdateFrequency),
        which every node start waited for: the same amount goes into allocatable now, as the
        kubelet would write it (and its patches, diffs of what it changed, leave it be)."""
        amounts = {self.spec.gpu_resource: self.spec.gpus, **self.spec.more_resources}
        operations = [{"op": "add", "path": f"/status/{field}/" + resource.replace("~", "~0").replace("/", "~1"),
                       "value": str(amount)}
                      for resource, amount in amounts.items() if amount for field in ("capacity", "allocatable")]
        if not operations:
            return
        response = self.probe.json_patch(f"/api/v1/nodes/{self.spec.name}/status", operations)
        if response is None or response.status != 200:
            detail = response.body.decode(errors="replace") if response else "no answer"
            raise NodeFailed(f"advertising GPUs on node {self.spec.name}: {detail}")

    def _ctr(self, *args: str) -> str:
        result = subprocess.run([str(CTR), f"--address={self.paths.containerd_socket}", "--namespace=k8s.io", *args],
                                capture_output=True, text=True, timeout=CTR_TIMEOUT_S, check=False)
        if result.returncode != 0:
            raise NodeFailed(f"ctr {' '.join(args)} on node {self.spec.name}: {result.stderr.strip()}")
        return result.stdout

    def _daemon_alive(self, daemon: str) -> bool:
        """Whether the daemon started runs (by its pid alone: nsenter is exec'ing it at first)."""
        try:
            return processes.alive(int(self._pid_file(daemon).read_text().split()[0]))
        except (FileNotFoundError, ValueError, IndexError):
            return False

    def _pid_file(self, daemon: str) -> Path:
        return self.layout.pid_file(daemon_pid_name(self.spec.index, daemon))

    def _log_tail(self, daemon: str) -> str:
        try:
            with open(self.log_file(daemon), "rb") as stream:
                stream.seek(0, os.SEEK_END)
                stream.seek(max(0, stream.tell() - LOG_TAIL_BYTES))
                return stream.read().decode(errors="replace")
        except FileNotFoundError:
            return "(no log)"


def _apiserver_url() -> str:
    """The apiserver as nodes reach it: on the bridge (loopback is the node's own)."""
    return f"https://{netsetup.HOST_IP}:{APISERVER_PORT}"


def _write_json(path: Path, document: dict) -> None:
    # JSON is YAML: the kubelet and kube-proxy read their configs either way.
    path.write_text(json.dumps(document, indent=2) + "\n")
