"""What a cluster may leave on the host, and its removal.

`down` first stops components and nodes politely; this is the belt and braces
after that, and also what tests use to prove nothing is left: the nodes' cgroup
trees (with every process in them: containers, containerd's shims), processes
tied to the run directory or inside the cluster's network namespaces, the
`dt-*` namespaces, the bridge and its veths, and mounts under the run directory.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from localcluster import hostnetwork, netsetup, processes
from localcluster.errors import ClusterError
from localcluster.layout import RunLayout
from localcluster.node import cgroups

log = logging.getLogger(__name__)

KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class Leftovers:
    pids: tuple[int, ...]
    netns: tuple[str, ...]
    links: tuple[str, ...]
    mounts: tuple[str, ...]
    cgroups: tuple[str, ...] = ()

    def empty(self) -> bool:
        return not (self.pids or self.netns or self.links or self.mounts or self.cgroups)


def find(layout: RunLayout) -> Leftovers:
    """Everything the cluster of `layout` may have left."""
    return _find(layout.root, hostnetwork.cluster_netns(), hostnetwork.cluster_links(), node_cgroups())


def find_nodes(layout: RunLayout, indices: Collection[int]) -> Leftovers:
    """What the nodes of these indices may have left."""
    found = [_find(
        layout.node_dir(index),
        [name for name in hostnetwork.cluster_netns() if netsetup.node_index_of(name) == index],
        [name for name in hostnetwork.cluster_links() if netsetup.node_index_of(name) == index],
        [name for name in node_cgroups() if netsetup.node_index_of(name) == index],
    ) for index in indices]
    return Leftovers(*(tuple(sorted({item for part in found for item in getattr(part, field)}))
                       for field in ("pids", "netns", "links", "mounts", "cgroups")))


def node_cgroups() -> list[str]:
    """Cgroups named like a node's (`dt-n<index>`), in any hierarchy."""
    names = set()
    for hierarchy in cgroups.hierarchies():
        names.update(entry.name for entry in hierarchy.iterdir()
                     if entry.is_dir() and netsetup.node_index_of(entry.name) is not None)
    return sorted(names)


def remove(layout: RunLayout) -> Leftovers:
    """Kill, delete and unmount everything `find` reports; returns what was found."""
    return _remove(find(layout))


def forget_api_state(layout: RunLayout) -> None:
    """Remove the stopped cluster's objects (RunLayout.api_state), so the next `up` starts
    empty: a last run's pods would otherwise come back, on nodes that are gone."""
    for path in layout.api_state:
        mounted = mounts_under(path)
        if mounted:  # never delete through a mount
            raise ClusterError(f"not removing {path}: still mounted: {mounted}")
        shutil.rmtree(path, ignore_errors=True)


def purge(root: Path) -> None:
    """Delete the run directory `root`, never through a mount (a bind-mounted directory
    would lose its files)."""
    remaining = mounts_under(root)
    if remaining:
        raise ClusterError(f"not purging {root}: still mounted: {remaining}")
    log.info("deleting %s", root)
    shutil.rmtree(root, ignore_errors=True)


def mounts_under(root: Path) -> list[str]:
    """Mount points in this mount namespace at or under `root`."""
    with open("/proc/self/mountinfo") as mountinfo:
        points = [_unescape(line.split()[4]) for line in mountinfo]
    return sorted(point for point in points if point == str(root) or point.startswith(f"{root}/"))


def _find(root: Path, namespaces: list[str], links: list[str], node_cgroup_names: list[str]) -> Leftovers:
    pids = set(processes.pids_under(root))
    for name in namespaces:
        pids.update(hostnetwork.netns_pids(name))
    for name in node_cgroup_names:
        pids.update(cgroups.pids(name))
    return Leftovers(
        pids=tuple(sorted(pids)),
        netns=tuple(namespaces),
        links=tuple(links),
        mounts=tuple(mounts_under(root)),
        cgroups=tuple(node_cgroup_names),
    )


def _remove(found: Leftovers) -> Leftovers:
    # A node's cgroup first: frozen, no process in it can fork away while it is emptied.
    for name in found.cgroups:
        log.warning("removing node cgroup %s and every process in it", name)
        cgroups.remove(name)
    for pid in found.pids:
        log.warning("killing leftover process %d", pid)
        processes.kill_session(pid)
    for pid in found.pids:
        processes.wait_exit(pid, KILL_WAIT_S)
    for name in found.netns:
        hostnetwork.delete_netns(name)
    for link in found.links:
        hostnetwork.delete_link(link)
    # Deepest first, so nested mounts do not keep their parents busy.
    for mount_point in sorted(found.mounts, key=len, reverse=True):
        log.warning("unmounting leftover %s", mount_point)
        subprocess.run(["umount", "-l", mount_point], check=False)
    return found


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    return field.encode().decode("unicode_escape")
