"""The cluster's network plan: its addresses, and the names of its namespaces and links.

Pure: node `index`'s netns, veth, address and pod subnets follow from the index alone,
so every part of the cluster (certificates, node configuration, the sweep of what a run
left) computes them alike. The bridge itself is made and removed by `hostnetwork`.
"""

from __future__ import annotations

import ipaddress
import re

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
