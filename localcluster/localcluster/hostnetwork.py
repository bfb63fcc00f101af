"""The cluster's network on the host: the bridge every node and pod namespace joins, and
the namespaces and interfaces named like the cluster's (found and removed).

Each node (localcluster.node.network) attaches its network namespace (`dt-n<index>`)
to the bridge with a veth; the host end of the bridge carries the apiserver's
advertised address, so pods reach the apiserver at 10.233.0.1:6443. This module
creates the bridge and, on `down`, removes every namespace and interface the
cluster may have left. The addresses and names are netsetup's plan.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

from localcluster.netsetup import (
    BRIDGE_MAC, BRIDGE_NAME, CLUSTER_CIDR, HOST_IP, HOST_IP_V6, LINK_PREFIX, NETNS_PREFIX, NODE_PREFIX_V6,
)

log = logging.getLogger(__name__)

IP_TIMEOUT_S = 30


def ensure_bridge() -> None:
    """Create the bridge with the host address, if it is not there yet."""
    if not _link_exists(BRIDGE_NAME):
        log.info("creating bridge %s with %s", BRIDGE_NAME, HOST_IP)
        _ip("link", "add", BRIDGE_NAME, "address", BRIDGE_MAC, "type", "bridge")
    if _bridge_mac() != BRIDGE_MAC:  # made by an earlier version
        _ip("link", "set", BRIDGE_NAME, "address", BRIDGE_MAC)
    addresses = _addresses(BRIDGE_NAME)
    prefix = f"{HOST_IP}/{CLUSTER_CIDR.prefixlen}"
    if prefix not in addresses:
        _ip("addr", "add", prefix, "dev", BRIDGE_NAME)
    # The apiserver reaches an IPv6-first node's kubelet at its IPv6 address, on-link here.
    # No duplicate address detection: the prefix is this bridge's alone.
    prefix_v6 = f"{HOST_IP_V6}/{NODE_PREFIX_V6}"
    if ipv6_enabled(BRIDGE_NAME) and prefix_v6 not in addresses:
        _ip("addr", "add", prefix_v6, "dev", BRIDGE_NAME, "nodad")
    _ip("link", "set", BRIDGE_NAME, "up")


def ipv6_enabled(link: str) -> bool:
    """Whether `link` may carry IPv6 (a kernel or namespace may have it off)."""
    setting = Path(f"/proc/sys/net/ipv6/conf/{link}/disable_ipv6")
    return setting.exists() and setting.read_text().strip() == "0"


def delete_bridge() -> None:
    if _link_exists(BRIDGE_NAME):
        delete_link(BRIDGE_NAME)


def cluster_netns() -> list[str]:
    """Network namespaces named like the cluster's (`dt-*`)."""
    result = _ip("-json", "netns", "list", check=False)
    entries = json.loads(result.stdout or "[]")
    return sorted(entry["name"] for entry in entries if entry["name"].startswith(NETNS_PREFIX))


def netns_pids(name: str) -> list[int]:
    result = _ip("netns", "pids", name, check=False)
    return [int(pid) for pid in result.stdout.split()]


def delete_netns(name: str) -> None:
    log.info("deleting network namespace %s", name)
    _ip("netns", "delete", name, check=False)


def cluster_links() -> list[str]:
    """The bridge, interfaces enslaved to it, and any other `dt*` interface (veth host ends)."""
    result = _ip("-json", "link", "show", check=False)
    names = [
        entry["ifname"]
        for entry in json.loads(result.stdout or "[]")
        if entry.get("master") == BRIDGE_NAME or entry["ifname"].startswith(LINK_PREFIX)
    ]
    # Enslaved interfaces first, the bridge last.
    return sorted(names, key=lambda name: (name == BRIDGE_NAME, name))


def delete_link(name: str) -> None:
    log.info("deleting interface %s", name)
    _ip("link", "delete", name, check=False)


def _link_exists(name: str) -> bool:
    return _ip("link", "show", name, check=False).returncode == 0


def _bridge_mac() -> str:
    return json.loads(_ip("-json", "link", "show", BRIDGE_NAME).stdout)[0]["address"]


def _addresses(name: str) -> set[str]:
    result = _ip("-json", "addr", "show", "dev", name)
    return {
        f"{info['local']}/{info['prefixlen']}"
        for entry in json.loads(result.stdout or "[]")
        for info in entry.get("addr_info", [])
    }


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=IP_TIMEOUT_S)
