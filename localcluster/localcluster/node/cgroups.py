"""A node's cgroup tree: `/<node>/daemons` (containerd, its shims, the kubelet, kube-proxy)
and `/<node>/pods` (the kubelet's cgroupRoot), in every cgroup v1 hierarchy.

Everything a node runs is under `/<node>`, so stopping a node, or sweeping what a killed
one left, is emptying one tree: no process of a node can escape it by daemonising, as
containerd's shims and the containers do.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
DAEMONS = "daemons"
PODS = "pods"
EMPTY_TIMEOUT_S = 20.0
POLL_S = 0.05


class CgroupError(RuntimeError):
    """A node's cgroup could not be created or emptied."""


def hierarchies() -> list[Path]:
    """Mount points of the cgroup v1 hierarchies (cpu, memory, pids... and name=systemd)."""
    points = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            separator = fields.index("-")
            if fields[separator + 1] == "cgroup":
                points.append(Path(fields[4]))
    return sorted(points)


def create(node_cgroup: str) -> None:
    """`/<node>`, `/<node>/daemons` and `/<node>/pods` in every hierarchy."""
    for hierarchy in hierarchies():
        for relative in (node_cgroup, f"{node_cgroup}/{DAEMONS}", f"{node_cgroup}/{PODS}"):
            directory = hierarchy / relative
            directory.mkdir(exist_ok=True)
            # A new cpuset has no CPUs and no memory nodes: nothing could run in it.
            for setting in ("cpuset.cpus", "cpuset.mems"):
                parent_value = directory.parent / setting
                if parent_value.exists() and not (directory / setting).read_text().strip():
                    (directory / setting).write_text(parent_value.read_text())


def join_daemons(node_cgroup: str, pid: int) -> None:
    """Move `pid` into `/<node>/daemons` in every hierarchy (before it starts children)."""
    for hierarchy in hierarchies():
        (hierarchy / node_cgroup / DAEMONS / "cgroup.procs").write_text(str(pid))


def pids(node_cgroup: str) -> set[int]:
    """Every process in the node's tree."""
    found: set[int] = set()
    for hierarchy in hierarchies():
        top = hierarchy / node_cgroup
        if top.is_dir():
            for directory, _, _ in os.walk(top):
                found.update(_procs(Path(directory)))
    return found


def empty(node_cgroup: str, timeout_s: float = EMPTY_TIMEOUT_S) -> None:
    """SIGKILL every process in the node's tree, frozen first so none can fork meanwhile."""
    freezer = _freezer(node_cgroup)
    deadline = time.monotonic() + timeout_s
    while remaining := pids(node_cgroup):
        if time.monotonic() > deadline:
            raise CgroupError(f"cgroup {node_cgroup} still has processes {sorted(remaining)} after {timeout_s:.0f} s")
        _set_freezer(freezer, "FROZEN")
        for pid in remaining:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _set_freezer(freezer, "THAWED")  # a frozen process cannot die
        time.sleep(POLL_S)


def remove(node_cgroup: str) -> None:
    """Empty the tree and delete it, deepest first, in every hierarchy."""
    empty(node_cgroup)
    for hierarchy in hierarchies():
        top = hierarchy / node_cgroup
        if not top.is_dir():
            continue
        directories = [Path(directory) for directory, _, _ in os.walk(top)]
        for directory in sorted(directories, key=lambda path: len(path.parts), reverse=True):
            _rmdir(directory)


def exists(node_cgroup: str) -> bool:
    return any((hierarchy / node_cgroup).is_dir() for hierarchy in hierarchies())


def _rmdir(directory: Path) -> None:
    # A killed process leaves its cgroup a moment after it is reaped.
    deadline = time.monotonic() + EMPTY_TIMEOUT_S
    while True:
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if time.monotonic() > deadline:
                raise CgroupError(f"cannot remove cgroup {directory}: {error}") from error
            time.sleep(POLL_S)


def _procs(directory: Path) -> set[int]:
    """The processes in one cgroup; none in one removed meanwhile (gone before it was
    opened: ENOENT; between the open and the read: ENODEV)."""
    try:
        return {int(line) for line in (directory / "cgroup.procs").read_text().split()}
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENODEV):
            return set()
        raise


def _freezer(node_cgroup: str) -> Path | None:
    state = CGROUP_ROOT / "freezer" / node_cgroup / "freezer.state"
    return state if state.exists() else None


def _set_freezer(state: Path | None, value: str) -> None:
    if state is not None:
        state.write_text(value)
