"""`localcluster down` leaves the host as it found it, real nodes and their pods included.

The kubelet sets kernel tunables and makes iptables chains, containerd and the CNI
plugins make mounts, network namespaces, interfaces, cgroups and files under /var and
/run. This test takes the cluster down, notes the host, brings up a node running a
pod, takes everything down again and compares: nothing may differ.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from kubernetes import client

from clusterfixtures import SessionRegistry
from localcluster.cluster import Cluster
from localcluster.node import cgroups
from test_controlplane import cli_output, run_cli, run_sleeper

SYSCTLS = ("kernel.panic", "kernel.panic_on_oops", "vm.overcommit_memory", "net.ipv4.ip_forward",
           "net.ipv4.conf.all.forwarding", "net.ipv4.conf.all.route_localnet", "net.netfilter.nf_conntrack_max",
           "fs.inotify.max_user_instances", "fs.inotify.max_user_watches")
HOST_PATHS = (Path("/var/log/containers"), Path("/var/lib/cni"), Path("/run/containerd"), Path("/var/log/pods"))


def host_snapshot() -> dict:
    """What a cluster could change on the host, in comparable form."""
    return {
        "sysctls": {name: _read_sysctl(name) for name in SYSCTLS},
        "iptables": _command(["iptables-save"], keep=lambda line: not line.startswith("#")),
        "ip6tables": _command(["ip6tables-save"], keep=lambda line: not line.startswith("#")),
        "mounts": sorted(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()),
        "netns": sorted(entry["name"] for entry in json.loads(_run(["ip", "-json", "netns", "list"]) or "[]")),
        "links": sorted(entry["ifname"] for entry in json.loads(_run(["ip", "-json", "link", "show"]))),
        "routes": _command(["ip", "route", "show", "table", "all"]),
        "cgroups": sorted(str(entry) for hierarchy in cgroups.hierarchies() for entry in hierarchy.iterdir()
                          if entry.is_dir()),
        "paths": {str(path): sorted(str(entry) for entry in path.rglob("*")) if path.exists() else None
                  for path in HOST_PATHS},
    }


@pytest.mark.exclusive
@pytest.mark.cluster
def test_down_leaves_the_host_as_it_found_it(cluster: Cluster, api_client, namespace):
    if SessionRegistry(cluster.layout).others_alive():
        pytest.skip("another pytest session is using this cluster; not taking it down under it")
    try:
        down = run_cli("down", "--keep-state")
        assert down.returncode == 0, cli_output(down)
        before = host_snapshot()

        Cluster.up(layout=cluster.layout)
        cluster.add_nodes({"host-a": 1})
        run_sleeper(client.CoreV1Api(api_client), namespace, "host-a")
        during = host_snapshot()
        changed = sorted(key for key in before if before[key] != during[key])
        assert {"netns", "links", "cgroups", "mounts"} <= set(changed), f"the node changed only {changed}"

        down = run_cli("down", "--keep-state")
        assert down.returncode == 0, cli_output(down)
        after = host_snapshot()
    finally:
        Cluster.up(layout=cluster.layout)
    differences = {key: {"before": before[key], "after": after[key]} for key in before if before[key] != after[key]}
    assert not differences, f"the host differs after down: {json.dumps(differences, indent=1)[:6000]}"


def _read_sysctl(name: str) -> str | None:
    path = Path("/proc/sys", *name.split("."))
    return path.read_text().strip() if path.exists() else None


def _command(argv: list[str], keep=lambda line: True) -> list[str]:
    return [line for line in _run(argv).splitlines() if keep(line)]


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout
