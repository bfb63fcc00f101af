"""What a cluster may leave on the host, and its removal.

`down` first stops components and agents politely; this is the belt and braces
after that, and also what tests use to prove nothing is left: processes tied
to the run directory or inside the cluster's network namespaces, the `dt-*`
namespaces, the bridge and its veths, and mounts under the run directory.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass

from localcluster import netsetup, processes
from localcluster.layout import RunLayout

log = logging.getLogger(__name__)

KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class Leftovers:
    pids: tuple[int, ...]
    netns: tuple[str, ...]
    links: tuple[str, ...]
    mounts: tuple[str, ...]

    def empty(self) -> bool:
        return not (self.pids or self.netns or self.links or self.mounts)


def find(layout: RunLayout) -> Leftovers:
    namespaces = netsetup.cluster_netns()
    pids = set(processes.pids_under(layout.root))
    for name in namespaces:
        pids.update(netsetup.netns_pids(name))
    return Leftovers(
        pids=tuple(sorted(pids)),
        netns=tuple(namespaces),
        links=tuple(netsetup.cluster_links()),
        mounts=tuple(mounts_under(layout)),
    )


def remove(layout: RunLayout) -> Leftovers:
    """Kill, delete and unmount everything `find` reports; returns what was found."""
    found = find(layout)
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
    for mount_point in sorted(mounts_under(layout), key=len, reverse=True):
        log.warning("unmounting leftover %s", mount_point)
        subprocess.run(["umount", "-l", mount_point], check=False)
    return found


def mounts_under(layout: RunLayout) -> list[str]:
    """Mount points in this mount namespace at or under the run directory."""
    with open("/proc/self/mountinfo") as mountinfo:
        points = [_unescape(line.split()[4]) for line in mountinfo]
    return sorted(point for point in points if layout.contains(point))


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    return field.encode().decode("unicode_escape")
