"""localcluster.nodegroups: a node group's indices are reused only once nothing uses them.

The daemons here are real processes (`sleep`), the holders real processes that exit, as a
CLI's `add-nodes` does: the registry judges both by what runs, not by what a test says.
CI's failure (efe9920): a group got indices whose dead daemons' pid files were still there,
a concurrent allocation took it for a dead group before its nodes started and got the same
indices, and the second group's first node, sweeping its index, killed the first's containerd.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from localcluster import processes
from localcluster.layout import RunLayout
from localcluster.nodegroups import NODE_DAEMONS, NodeGroupRegistry, daemon_pid_name

# Allocates a group, prints its id and holds it until its stdin is closed.
ALLOCATE_AND_HOLD = """\
import sys
from pathlib import Path
from localcluster.layout import RunLayout
from localcluster.nodegroups import NodeGroupRegistry
print(NodeGroupRegistry(RunLayout(Path(sys.argv[1]))).allocate(sys.argv[2:]).group_id, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def layout(tmp_path) -> RunLayout:
    layout = RunLayout(tmp_path)
    layout.pids.mkdir(parents=True)
    return layout


@contextmanager
def daemons(layout: RunLayout, indices: range) -> Iterator[list[subprocess.Popen]]:
    """A running process with a pid file for each daemon of the nodes at `indices`."""
    running = []
    try:
        for index in indices:
            for daemon in NODE_DAEMONS:
                process = subprocess.Popen(["sleep", "600"])
                running.append(process)
                layout.pid_file(daemon_pid_name(index, daemon)).write_text(f"{process.pid}\nsleep\n")
        yield running
    finally:
        kill(running)


def kill(running: list[subprocess.Popen]) -> None:
    for process in running:
        process.kill()
        process.wait()


@contextmanager
def held(layout: RunLayout, names: list[str]) -> Iterator[str]:
    """A group of `names` that another process allocated and holds until the block ends."""
    # From the run directory: the project root's localcluster/ would shadow the package.
    holder = subprocess.Popen([sys.executable, "-c", ALLOCATE_AND_HOLD, str(layout.root), *names],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=layout.root)
    try:
        group_id = holder.stdout.readline().strip()
        assert group_id, "the holder did not allocate"
        yield group_id
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def allocate_from_a_process_that_exits(layout: RunLayout, names: list[str]) -> str:
    with held(layout, names) as group_id:
        return group_id


def live_pid_files(layout: RunLayout, indices: range) -> list[str]:
    return [daemon_pid_name(index, daemon) for index in indices for daemon in NODE_DAEMONS
            if layout.pid_file(daemon_pid_name(index, daemon)).exists()]


def test_a_group_whose_nodes_have_not_started_keeps_its_indices_though_dead_ones_used_them(layout):
    groups = NodeGroupRegistry(layout)
    with daemons(layout, range(1, 3)) as first_nodes:
        first = allocate_from_a_process_that_exits(layout, ["old-a", "old-b"])
    # first_nodes are dead: the group is reclaimed, its indices free again.
    assert first_nodes and all(process.poll() is not None for process in first_nodes)
    second = allocate_from_a_process_that_exits(layout, ["new-a", "new-b"])
    assert [record.group_id for record in groups.records()] == [second]
    assert live_pid_files(layout, range(1, 3)) == []  # the dead daemons' files went with them
    third = groups.allocate(["other"]).group_id
    assert [record.group_id for record in groups.records()] == [second, third]
    assert groups.records()[1].first_index == 3  # not an index of the group yet to start


def test_a_group_whose_daemons_died_is_kept_while_its_holder_runs_and_reclaimed_after(layout):
    groups = NodeGroupRegistry(layout)
    with held(layout, ["a", "b"]) as group_id:
        with daemons(layout, range(1, 3)):
            pass  # the nodes ran, then died, as a failed start's or a teardown's do
        assert groups.allocate(["c"]).first_index == 3
        assert group_id in [record.group_id for record in groups.records()]
    groups.allocate(["d"])
    assert group_id not in [record.group_id for record in groups.records()]
    assert groups.hold(group_id) is False  # its teardown must now leave the indices alone


def test_a_group_with_a_live_daemon_is_kept_whoever_held_it(layout):
    groups = NodeGroupRegistry(layout)
    group_id = allocate_from_a_process_that_exits(layout, ["a", "b"])
    with daemons(layout, range(1, 3)) as running:
        kill(running[:-1])
        assert groups.allocate(["c"]).first_index == 3
        assert group_id in [record.group_id for record in groups.records()]


def test_holding_a_group_makes_this_process_its_holder(layout):
    groups = NodeGroupRegistry(layout)
    group_id = allocate_from_a_process_that_exits(layout, ["a"])
    assert not processes.identity_alive(groups.records()[0].holder)
    assert groups.hold(group_id) is True
    assert groups.records()[0].holder == processes.identity(os.getpid())
