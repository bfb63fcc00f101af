"""What a cluster may leave on the host, and its removal.

`down` first stops components and agents politely; this is the belt and braces
after that, and also what tests use to prove nothing is left: processes tied
to the run directory or inside the cluster's network namespaces, containers
its node agents created, the `dt-*` namespaces, the bridge and its veths, and
mounts under the run directory.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from localcluster import netsetup, processes
from localcluster.layout import RunLayout
from localcluster.podman import STATE_DIR_LABEL, labelled_containers, podman

log = logging.getLogger(__name__)

KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class Leftovers:
    pids: tuple[int, ...]
    netns: tuple[str, ...]
    links: tuple[str, ...]
    mounts: tuple[str, ...]
    containers: tuple[str, ...] = ()

    def empty(self) -> bool:
        return not (self.pids or self.netns or self.links or self.mounts or self.containers)


def find(layout: RunLayout) -> Leftovers:
    """Everything the cluster of `layout` may have left."""
    return _find(layout.root, netsetup.cluster_netns(), netsetup.cluster_links())


def find_node_group(state_dir: Path, indices: Collection[int]) -> Leftovers:
    """What one node agent (its state dir, its nodes' indices) may have left."""
    return _find(
        state_dir,
        [name for name in netsetup.cluster_netns() if netsetup.node_index_of(name) in indices],
        [name for name in netsetup.cluster_links() if netsetup.node_index_of(name) in indices],
    )


def remove(layout: RunLayout) -> Leftovers:
    """Kill, delete and unmount everything `find` reports; returns what was found."""
    return _remove(find(layout))


def remove_node_group(state_dir: Path, indices: Collection[int]) -> Leftovers:
    return _remove(find_node_group(state_dir, indices))


def mounts_under(root: Path) -> list[str]:
    """Mount points in this mount namespace at or under `root`."""
    with open("/proc/self/mountinfo") as mountinfo:
        points = [_unescape(line.split()[4]) for line in mountinfo]
    return sorted(point for point in points if point == str(root) or point.startswith(f"{root}/"))


def _find(root: Path, namespaces: list[str], links: list[str]) -> Leftovers:
    pids = set(processes.pids_under(root))
    for name in namespaces:
        pids.update(netsetup.netns_pids(name))
    return Leftovers(
        pids=tuple(sorted(pids)),
        netns=tuple(namespaces),
        links=tuple(links),
        mounts=tuple(mounts_under(root)),
        containers=tuple(sorted(cid for cid, state_dir in labelled_containers(STATE_DIR_LABEL).items()
                                if state_dir == str(root) or state_dir.startswith(f"{root}/"))),
    )


def _remove(found: Leftovers) -> Leftovers:
    if found.containers:
        log.warning("removing %d leftover containers", len(found.containers))
        podman(["rm", "--force", "--time", "0", *found.containers], check=False)
    for pid in found.pids:
        log.warning("killing leftover process %d", pid)
        processes.kill_session(pid)
    for pid in found.pids:
        processes.wait_exit(pid, KILL_WAIT_S)
    for name in found.netns:
        netsetup.delete_netns(name)
    for link in found.links:
        netsetup.delete_link(link)
    # Deepest first, so nested mounts do not keep their parents busy.
    for mount_point in sorted(found.mounts, key=len, reverse=True):
        log.warning("unmounting leftover %s", mount_point)
        subprocess.run(["umount", "-l", mount_point], check=False)
    return found


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    return field.encode().decode("unicode_escape")
