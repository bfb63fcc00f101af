"""localcluster.node.cgroups: a node's tree swept while the kernel removes part of it."""

import os
import pathlib
import uuid

from localcluster.node import cgroups


def test_a_cgroup_removed_between_the_open_and_the_read_holds_no_processes(monkeypatch):
    """A node's sweep lists its cgroups while another sweep removes them (full17: a node
    group reclaimed as a new node of the same name launched): the read of a cgroup.procs
    opened before its cgroup went fails with ENODEV, which is no process, not an error."""
    hierarchy = next(h for h in cgroups.hierarchies() if h.name == "pids")
    node_cgroup = f"dt-unit-{uuid.uuid4().hex[:8]}"
    (hierarchy / node_cgroup).mkdir()
    opened = pathlib.Path.open

    def open_then_removed(path, *args, **kwargs):
        handle = opened(path, *args, **kwargs)
        if path.name == "cgroup.procs" and path.parent.exists():
            os.rmdir(path.parent)  # the other sweep, between this open and its read
        return handle

    monkeypatch.setattr(pathlib.Path, "open", open_then_removed)
    try:
        assert cgroups.pids(node_cgroup) == set()
    finally:
        monkeypatch.undo()
        if (hierarchy / node_cgroup).exists():
            (hierarchy / node_cgroup).rmdir()
