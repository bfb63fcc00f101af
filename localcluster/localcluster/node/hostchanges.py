"""What real nodes change on the host beyond their own directories, and its restoration.

The kubelet sets kernel tunables at start (`protectKernelDefaults: false`: it would
otherwise refuse to start on a machine that has other values), writes symlinks to
container logs in /var/log/containers and its device plugins' socket in
/var/lib/kubelet/device-plugins (a path in its code, for every kubelet of the host), and
the CNI plugins cache results in /var/lib/cni; containerd's shims put sockets in
/run/containerd/s. And the nodes need
more inotify instances than a host allows by default (`raise_inotify_limits`). Before
the first node starts, `record` notes how the host was; `restore`, at `down`, puts it back:
the sysctls to their values, the directories gone if they were not there, and in any
case the entries of this cluster's nodes removed.
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from localcluster.node.config import NETWORK_PREFIX

log = logging.getLogger(__name__)

# What the kubelet's container manager sets (pkg/kubelet/cm, setupKernelTunables).
KERNEL_TUNABLES = ("kernel.panic", "kernel.panic_on_oops", "vm.overcommit_memory")
# Every kubelet and containerd holds inotify instances (the kubelet's file watchers, the
# CRI plugin's CNI config monitor); the host's default of 128 per user ran out at the
# 17th node ("failed to create fsnotify watcher: too many open files": containerd then
# serves no CRI). Raised, never lowered, to what kind documents for many nodes on a host.
INOTIFY_MINIMUMS = {"fs.inotify.max_user_instances": 8192, "fs.inotify.max_user_watches": 524288}
RECORDED_SYSCTLS = (*KERNEL_TUNABLES, *INOTIFY_MINIMUMS)
CONTAINER_LOG_LINKS = Path("/var/log/containers")
CNI_CACHE = Path("/var/lib/cni")
SHIM_SOCKETS = Path("/run/containerd")
KUBELET_DIRECTORY = Path("/var/lib/kubelet")
HOST_DIRECTORIES = (CONTAINER_LOG_LINKS, CNI_CACHE, SHIM_SOCKETS, KUBELET_DIRECTORY)


@dataclass(frozen=True)
class HostState:
    sysctls: dict[str, str]
    directories: dict[str, bool]  # path: existed


def read() -> HostState:
    return HostState(
        sysctls={name: _sysctl(name) for name in RECORDED_SYSCTLS},
        directories={str(path): path.exists() for path in HOST_DIRECTORIES},
    )


def record(state_file: Path) -> None:
    """Note the host as it is, unless a node of this cluster already changed it."""
    if not state_file.exists():
        state_file.write_text(json.dumps(asdict(read()), indent=2) + "\n")


def raise_inotify_limits() -> None:
    """At least INOTIFY_MINIMUMS (after `record`, so `restore` puts the host's values back)."""
    for name, minimum in INOTIFY_MINIMUMS.items():
        if int(_sysctl(name)) < minimum:
            subprocess.run(["sysctl", "-q", "-w", f"{name}={minimum}"], check=True)


def restore(state_file: Path, run_root: Path) -> None:
    """Undo what the nodes of the cluster in `run_root` changed; a no-op if none started."""
    remove_entries(run_root, NETWORK_PREFIX)
    remove_dead_shim_sockets()
    _remove_dead_sockets(KUBELET_DIRECTORY / "device-plugins")
    if not state_file.exists():
        return
    before = HostState(**json.loads(state_file.read_text()))
    for name, value in before.sysctls.items():
        if _sysctl(name) != value:
            log.info("restoring %s = %s", name, value)
            subprocess.run(["sysctl", "-q", "-w", f"{name}={value}"], check=False)
    for path_text, existed in before.directories.items():
        path = Path(path_text)
        if not existed and path.exists():
            _remove_if_ours(path)
    state_file.unlink()


def remove_dead_shim_sockets() -> None:
    """containerd's shims leave their sockets in /run/containerd/s when killed: remove those
    nobody listens on any more (a live one is a running shim's, of a node or of anyone)."""
    _remove_dead_sockets(SHIM_SOCKETS / "s")


def _remove_dead_sockets(directory: Path) -> None:
    for entry in directory.glob("*"):
        if not entry.is_socket():
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(entry))
            except ConnectionRefusedError:
                entry.unlink(missing_ok=True)
            except OSError:
                pass


def remove_entries(root: Path, network_prefix: str) -> None:
    """Container log links into `root`, and the CNI results of the pods on networks named
    `network_prefix`... (one node's network, or all of the cluster's)."""
    if CONTAINER_LOG_LINKS.is_dir():
        for link in CONTAINER_LOG_LINKS.iterdir():
            try:
                if link.is_symlink() and str(link.readlink()).startswith(f"{root}/"):
                    link.unlink(missing_ok=True)
            except FileNotFoundError:  # removed meanwhile (the group's nodes stop together)
                continue
    results = CNI_CACHE / "results"
    if not results.is_dir():
        return
    # <network>-<sandbox>-eth0 of the nodes' bridge networks, and containerd's own
    # cni-loopback-<sandbox>-lo of the same sandboxes.
    sandboxes = set()
    for entry in results.iterdir():
        if entry.name.startswith(network_prefix):
            sandboxes.add(entry.name.rsplit("-", 2)[-2])
            entry.unlink(missing_ok=True)
    for sandbox in sandboxes:
        (results / f"cni-loopback-{sandbox}-lo").unlink(missing_ok=True)


def _remove_if_ours(path: Path) -> None:
    """A directory the nodes created, unless someone else put something of theirs in it."""
    leftovers = [entry for entry in path.rglob("*") if not entry.is_dir()]
    if leftovers:
        log.warning("keeping %s: it holds files of others (%s)", path, leftovers[0])
        return
    shutil.rmtree(path, ignore_errors=True)


def _sysctl(name: str) -> str:
    return Path("/proc/sys", *name.split(".")).read_text().strip()
