"""The cluster's host network: the bridge every node and pod namespace joins.

Each node (localcluster.node.network) attaches its network namespace (`dt-n<index>`)
to the bridge with a veth; the host end of the bridge carries the apiserver's
advertised address, so pods reach the apiserver at 10.233.0.1:6443. This module
creates the bridge and, on `down`, removes every namespace and interface the
cluster may have left.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

BRIDGE_NAME = "dtbr0"
# A bridge left to itself takes the lowest MAC among its ports, so it changes address as
# nodes come and go. Nodes that learnt the old one (the node group started together)
# then lose the apiserver until their ARP entry expires: kubelets missed heartbeats and
# went NotReady. A fixed, locally administered address never changes.
BRIDGE_MAC = "02:64:74:00:00:01"
CLUSTER_CIDR = ipaddress.ip_network("10.233.0.0/16")
HOST_IP = "10.233.0.1"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
# IPv6, for nodes whose pods are dual-stack, IPv6 first (NodeSpec.ipv6_first): the same
# plan in a unique local prefix. Nodes and the host share fd74:6400::/64 on the bridge;
# node `index`'s pods get fd74:6400:0:<index, hex>::/64, reached through that node's address.
# The nodes route to each other's pod subnets (network.py), so the host forwards nothing.
CLUSTER_CIDR_V6 = ipaddress.ip_network("fd74:6400::/48")
HOST_IP_V6 = "fd74:6400::1"
NODE_PREFIX_V6 = 64
NETNS_PREFIX = "dt-"
# Host-side interfaces of the cluster (the bridge, veth ends) all start with this.
LINK_PREFIX = "dt"
# The nodes' names (localcluster/node/network.py): node netns dt-n<idx> with host veth
# dtn<idx>; the older pod names dt-p<idx>-<n> / dtv<idx>-<n> are still recognised, so
# `down` clears what an earlier version left.
_NODE_OWNED_NAME = re.compile(r"^dt-?[npv](\d+)(-\d+)?$")
NODE_INDEX_MIN = 1
NODE_INDEX_MAX = 240
NODE_IP_OFFSET = 10
IP_TIMEOUT_S = 30


def node_ip(index: int) -> str:
    """The address of node `index`'s network namespace: 10.233.0.(10+index)."""
    if not NODE_INDEX_MIN <= index <= NODE_INDEX_MAX:
        raise ValueError(f"node index must be in {NODE_INDEX_MIN}..{NODE_INDEX_MAX}, got {index}")
    return str(CLUSTER_CIDR.network_address + NODE_IP_OFFSET + index)


def pod_subnet(index: int) -> str:
    """Node `index`'s pods: 10.233.<index>.0/24, answered for on the bridge by the node."""
    node_ip(index)  # validates the index
    return f"10.233.{index}.0/24"


def node_ip_v6(index: int) -> str:
    """Node `index`'s IPv6 address on the bridge: fd74:6400::(10+index) (hex)."""
    node_ip(index)  # validates the index
    return str(CLUSTER_CIDR_V6.network_address + NODE_IP_OFFSET + index)


def pod_subnet_v6(index: int) -> str:
    """Node `index`'s pods' IPv6 subnet: fd74:6400:0:<index, hex>::/64."""
    node_ip(index)  # validates the index
    return str(ipaddress.ip_network((int(CLUSTER_CIDR_V6.network_address) + (index << 64), 64)))


def node_netns(index: int) -> str:
    return f"{NETNS_PREFIX}n{index}"


def node_host_veth(index: int) -> str:
    """The host end of node `index`'s veth, on the bridge."""
    return f"{LINK_PREFIX}n{index}"


def node_index_of(name: str) -> int | None:
    """The node index a netns or host veth named by a node belongs to, if any."""
    match = _NODE_OWNED_NAME.match(name)
    return int(match.group(1)) if match else None


def all_node_ips() -> list[str]:
    """Every address a node may have, IPv4 and IPv6."""
    indices = range(NODE_INDEX_MIN, NODE_INDEX_MAX + 1)
    return [node_ip(index) for index in indices] + [node_ip_v6(index) for index in indices]


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
