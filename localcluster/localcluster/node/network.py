"""A node's network namespace on the cluster bridge, and how its pods are reached.

The node's netns (`dt-n<index>`) has 10.233.0.(10+index)/16 on a veth whose host end
is on the bridge, like a machine on a flat network. Its pods live behind the CNI bridge
`cni0` inside that netns, in 10.233.<index>.0/24. The node answers ARP on the cluster
bridge for its pod subnet (proxy ARP), so the host (the apiserver), other nodes and
their pods reach every pod directly, with no route to manage anywhere and no
forwarding enabled on the host.
"""

from __future__ import annotations

import logging
import subprocess

from localcluster import netsetup
from localcluster.node.config import NodeSpec

log = logging.getLogger(__name__)

IP_TIMEOUT_S = 30


class NetworkError(RuntimeError):
    """An `ip` or `sysctl` command failed."""


def create(spec: NodeSpec) -> None:
    """The node's netns with its veth on the bridge; what a crashed run left is removed first."""
    remove(spec)
    _ip_batch([
        f"netns add {spec.netns}",
        f"link add {spec.host_veth} type veth peer name eth0 netns {spec.netns}",
        f"link set {spec.host_veth} master {netsetup.BRIDGE_NAME} up",
        # The host may still map this index's addresses to the MAC of the node that had
        # it before; it would try that one first.
        f"neigh flush to {spec.ip} dev {netsetup.BRIDGE_NAME}",
        f"neigh flush to {spec.pod_subnet} dev {netsetup.BRIDGE_NAME}",
    ])
    prefix = netsetup.CLUSTER_CIDR.prefixlen
    _ip_batch([f"addr add {spec.ip}/{prefix} dev eth0", "link set eth0 up", "link set lo up"], netns=spec.netns)
    # Per-namespace settings: the host's own stay as they are.
    _sysctl(spec.netns, "net.ipv4.ip_forward=1", "net.ipv4.conf.eth0.proxy_arp=1")
    if spec.ipv6:
        _add_ipv6(spec)
    log.info("node %s: netns %s at %s, pods in %s", spec.name, spec.netns, spec.ip, spec.pod_subnet)


def _add_ipv6(spec: NodeSpec) -> None:
    """The node's IPv6 address on the bridge, and a route to every IPv6 pod subnet a node
    may have, through the address that node would have: IPv6 has no proxy ARP for a
    whole subnet, and routes fixed by index need no update when nodes come and go (one
    to a node that does not exist goes nowhere, as its IPv4 pods' addresses do)."""
    _sysctl(spec.netns, "net.ipv6.conf.all.forwarding=1")
    routes = [f"route replace {netsetup.pod_subnet_v6(other)} via {netsetup.node_ip_v6(other)} dev eth0"
              for other in range(netsetup.NODE_INDEX_MIN, netsetup.NODE_INDEX_MAX + 1) if other != spec.index]
    _ip_batch([f"addr add {spec.ip_v6}/{netsetup.NODE_PREFIX_V6} dev eth0 nodad", *routes], netns=spec.netns)
    log.info("node %s: IPv6 %s, pods in %s", spec.name, spec.ip_v6, netsetup.pod_subnet_v6(spec.index))


def remove(spec: NodeSpec) -> None:
    """Delete the node's netns and veth (pods' netns are containerd's, under the node's state)."""
    _ip_batch([f"link del {spec.host_veth}"], check=False)
    _ip_batch([f"netns del {spec.netns}"], check=False)


def netns_path(spec: NodeSpec) -> str:
    return f"/run/netns/{spec.netns}"


def _sysctl(netns: str, *settings: str) -> None:
    # `ip netns exec` remounts /sys but /proc/sys/net is the namespace's own.
    result = subprocess.run(["ip", "netns", "exec", netns, "sysctl", "-q", "-w", *settings],
                            capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise NetworkError(f"sysctl {' '.join(settings)} in {netns}: {result.stderr.strip()}")


def _ip_batch(commands: list[str], netns: str | None = None, check: bool = True) -> None:
    argv = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    result = subprocess.run(argv, input="\n".join(commands) + "\n", capture_output=True, text=True,
                            timeout=IP_TIMEOUT_S, check=False)
    if check and result.returncode != 0:
        raise NetworkError(f"ip {' / '.join(commands)}: {result.stderr.strip()}")
