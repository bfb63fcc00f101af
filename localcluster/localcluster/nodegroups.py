"""Cluster-wide bookkeeping of node groups: names and node indices.

A node's index fixes its addresses (node netns 10.233.0.(10+index), pod CIDR
10.233.index.0/24), so two nodes must never get the same index, and node
names must be unique. Several processes (the CLI, test sessions)
may add nodes at once, so the record is a JSON file updated under an flock.

A group whose every daemon has died (a run killed outright) is reclaimed, so its indices
serve again; but the daemons' pid files are named by index, and a node's run-time files,
netns and image store too. So a group is never reclaimed while the process that holds it
(the one starting or stopping its nodes) runs, and its indices come free with no pid files
left: otherwise a new group's nodes would be taken for the dead ones (and reclaimed as
they start), and the old group's teardown would stop the new nodes.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from localcluster import netsetup, processes
from localcluster.layout import RunLayout

log = logging.getLogger(__name__)

# A DNS-1123 subdomain, what Kubernetes accepts as a node name (ip-10-0-1-7.ec2.internal).
NODE_NAME_PATTERN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A label value, what the kubelet makes of the machine's hostname for kubernetes.io/hostname.
HOSTNAME_PATTERN = re.compile(r"^[a-z0-9]([-.a-z0-9]{0,61}[a-z0-9])?$")
NODE_SPEC_FORMAT = "NAME[/HOSTNAME]=GPUS[,...], e.g. gpu-a=4,ip-10-0-1-7.ec2.internal/ip-10-0-1-7=2"


class NodeAllocationError(ValueError):
    """The requested nodes cannot be added (bad or taken names, no free indices)."""


@dataclass(frozen=True)
class NodeGroupRecord:
    """One group of nodes added together: node i of `names` has index first_index + i."""

    group_id: str
    first_index: int
    names: tuple[str, ...]
    # The process starting or stopping the nodes (processes.identity): the group is its
    # while it runs. A CLI's `add-nodes` exits with its nodes up; they then hold the group.
    holder: str | None = None

    def indices(self) -> range:
        return range(self.first_index, self.first_index + len(self.names))


def parse_node_spec(text: str) -> tuple[dict[str, int], dict[str, str]]:
    """Parse "gpu-a=4,ip-10-0-1-7.ec2.internal/ip-10-0-1-7=2" into GPUs by node name and the
    hostname labels that differ from their node's name ({"ip-10-0-1-7.ec2.internal": "ip-10-0-1-7"})."""
    gpus: dict[str, int] = {}
    hostnames: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        names, sep, count = item.partition("=")
        name, slash, hostname = (part.strip() for part in names.partition("/"))
        if not sep or not count.strip().isdigit() or (slash and not hostname):
            raise ValueError(f"bad node spec {item!r}; please use the format {NODE_SPEC_FORMAT}")
        gpus[name] = int(count)
        if slash and hostname != name:
            hostnames[name] = hostname
    validate_hostnames(gpus, hostnames)
    return gpus, hostnames


def validate_hostnames(spec: dict[str, int], hostnames: dict[str, str]) -> None:
    """Hostname labels must be label values, of nodes in `spec`, one node each (as one machine each)."""
    strangers = sorted(set(hostnames) - set(spec))
    if strangers:
        raise NodeAllocationError(f"hostnames given for nodes not requested: {', '.join(strangers)}")
    bad = sorted(hostname for hostname in hostnames.values() if not HOSTNAME_PATTERN.match(hostname))
    if bad:
        raise NodeAllocationError(f"invalid hostnames {bad}: use at most 63 lowercase letters, digits, '-' and '.'")
    labels = [hostnames.get(name, name) for name in spec]
    if len(set(labels)) != len(labels):
        raise NodeAllocationError(f"two nodes with one hostname label in {labels}")


# What runs a real node (localcluster/node/realnode.py), in order of start.
NODE_DAEMONS = ("containerd", "kubelet", "kube-proxy")


def daemon_pid_name(index: int, daemon: str) -> str:
    """The pid file's name of one of node `index`'s daemons."""
    return f"{netsetup.node_netns(index)}-{daemon}"


class NodeGroupRegistry:
    """The node groups of one run directory."""

    def __init__(self, layout: RunLayout):
        self._layout = layout

    def records(self) -> list[NodeGroupRecord]:
        with self._locked():
            return self._load()

    def allocate(self, names: list[str]) -> NodeGroupRecord:
        """Reserve a contiguous block of indices for `names`, which must be new names."""
        _validate_names(names)
        with self._locked():
            records = self._reclaim_dead(self._load())
            taken_names = {name for record in records for name in record.names}
            clashes = sorted(taken_names.intersection(names))
            if clashes:
                raise NodeAllocationError(f"node names already in the cluster: {', '.join(clashes)}")
            first = _free_block(records, len(names))
            record = NodeGroupRecord(f"{first:03d}-{secrets.token_hex(3)}", first, tuple(names),
                                     processes.identity(os.getpid()))
            self._forget_dead_daemons(record)
            self._save([*records, record])
        log.info("allocated node indices %d..%d to %s", first, first + len(names) - 1, ", ".join(names))
        return record

    def hold(self, group_id: str) -> bool:
        """Make this process the group's holder (before stopping its nodes), so no one reclaims
        it meanwhile; False if it was reclaimed: its indices may be another group's by now."""
        with self._locked():
            records = self._load()
            held = [replace(record, holder=processes.identity(os.getpid())) if record.group_id == group_id else record
                    for record in records]
            self._save(held)
        return any(record.group_id == group_id for record in records)

    def release(self, group_id: str) -> None:
        with self._locked():
            self._save([record for record in self._load() if record.group_id != group_id])

    def clear(self) -> None:
        with self._locked():
            self._save([])

    def _reclaim_dead(self, records: list[NodeGroupRecord]) -> list[NodeGroupRecord]:
        """Drop groups no live process holds whose nodes were started and whose every daemon
        has died (a run killed outright, a CLI's nodes killed), and their pid files."""
        kept = []
        for record in records:
            pid_files = self._pid_files(record)
            held = record.holder is not None and processes.identity_alive(record.holder)
            started = any(pid_file.exists() for pid_file in pid_files)
            if not held and started and all(processes.read_pid(pid_file) is None for pid_file in pid_files):
                log.warning("reclaiming node group %s: its nodes are gone", record.group_id)
                self._forget_dead_daemons(record)
                continue
            kept.append(record)
        return kept

    def _forget_dead_daemons(self, record: NodeGroupRecord) -> None:
        """Remove the pid files of the group's indices whose daemons are dead: a group's nodes
        count as started once one of them has written its own."""
        for pid_file in self._pid_files(record):
            if processes.read_pid(pid_file) is None:
                pid_file.unlink(missing_ok=True)

    def _pid_files(self, record: NodeGroupRecord) -> list[Path]:
        return [self._layout.pid_file(daemon_pid_name(index, daemon))
                for index in record.indices() for daemon in NODE_DAEMONS]

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock_path = self._layout.node_groups_file.with_suffix(".lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _load(self) -> list[NodeGroupRecord]:
        path = self._layout.node_groups_file
        if not path.exists():
            return []
        return [
            NodeGroupRecord(item["group_id"], item["first_index"], tuple(item["names"]), item.get("holder"))
            for item in json.loads(path.read_text())
        ]

    def _save(self, records: list[NodeGroupRecord]) -> None:
        path = self._layout.node_groups_file
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps([asdict(record) for record in records], indent=2) + "\n")
        temporary.replace(path)


def _validate_names(names: list[str]) -> None:
    if not names:
        raise NodeAllocationError("no nodes requested")
    if len(set(names)) != len(names):
        raise NodeAllocationError(f"duplicate node names in {names}")
    bad = [name for name in names if not NODE_NAME_PATTERN.match(name)]
    if bad:
        raise NodeAllocationError(f"invalid node names {bad}: use lowercase letters, digits, '-' and '.' "
                                  "(a DNS subdomain, e.g. ip-10-0-1-7.ec2.internal)")


def _free_block(records: list[NodeGroupRecord], size: int) -> int:
    """The lowest first index of `size` consecutive free indices."""
    used = {index for record in records for index in record.indices()}
    run_start, run_length = netsetup.NODE_INDEX_MIN, 0
    for index in range(netsetup.NODE_INDEX_MIN, netsetup.NODE_INDEX_MAX + 1):
        if index in used:
            run_start, run_length = index + 1, 0
            continue
        run_length += 1
        if run_length == size:
            return run_start
    raise NodeAllocationError(
        f"no {size} consecutive free node indices in {netsetup.NODE_INDEX_MIN}..{netsetup.NODE_INDEX_MAX}"
    )
