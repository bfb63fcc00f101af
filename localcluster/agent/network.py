"""Node and pod networks: one netns per node and per pod, all on the host bridge.

Every node gets netns `dt-n<idx>` with address 10.233.0.(10+idx)/16 (its
hostNetwork pods live there), and every pod gets netns `dt-p<idx>-<n>` with
10.233.<idx>.<n>/16 from the node's podCIDR. All of them hang off one bridge
in one /16, so pods, nodes and the host (the apiserver) reach each other
directly without routes, like a flat CNI network. Names start with `dt-` so
`localcluster down` can sweep what a crashed agent leaves behind.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from dataclasses import dataclass

from localcluster.agent.netns import NetworkError, ip_batch, link_names, netns_names
from localcluster.agent.settings import CLUSTER_NETWORK, NETNS_PREFIX, NodeSpec

log = logging.getLogger(__name__)

POD_HOST_MIN = 2
POD_HOST_MAX = 254
PREFIX_LEN = CLUSTER_NETWORK.prefixlen


class AddressesExhausted(Exception):
    pass


@dataclass(frozen=True)
class PodNetwork:
    """Where a pod's processes live on the network."""

    ip: str
    netns: str
    # None for hostNetwork pods, which share the node's netns.
    host_veth: str | None


class NodeNetwork:
    """One node's netns and the addresses of its pods."""

    def __init__(self, node: NodeSpec, bridge: str):
        self.node = node
        self.bridge = bridge
        self._lock = threading.Lock()
        self._in_use: set[int] = set()
        self._last = POD_HOST_MIN - 1

    @property
    def host_network(self) -> PodNetwork:
        return PodNetwork(ip=self.node.ip, netns=self.node.netns, host_veth=None)

    def create(self) -> None:
        self.sweep()
        node = self.node
        if self.bridge not in link_names():
            raise NetworkError(f"bridge {self.bridge} does not exist; `python -m localcluster up` creates it")
        ip_batch([
            f"netns add {node.netns}",
            f"link add {node.host_veth} type veth peer name eth0 netns {node.netns}",
            f"link set {node.host_veth} master {self.bridge} up",
        ])
        ip_batch([f"addr add {node.ip}/{PREFIX_LEN} dev eth0", "link set eth0 up", "link set lo up"], netns=node.netns)
        log.info("node %s: netns %s at %s", node.name, node.netns, node.ip)

    def destroy(self) -> None:
        self.sweep()
        log.info("node %s: removed netns %s", self.node.name, self.node.netns)

    def sweep(self) -> None:
        """Remove this node's namespaces and links, killing what still runs in them."""
        prefix = f"{NETNS_PREFIX}p{self.node.index}-"
        stale = [name for name in netns_names() if name.startswith(prefix) or name == self.node.netns]
        for name in stale:
            _kill_netns_processes(name)
        links = [
            name for name in link_names()
            if name == self.node.host_veth or name.startswith(f"dtv{self.node.index}-")
        ]
        commands = [f"link del {name}" for name in links] + [f"netns del {name}" for name in stale]
        if commands:
            ip_batch(commands, check=False)

    def allocate(self) -> PodNetwork:
        """Reserve the next free address, round robin so a freed address is not reused at once."""
        with self._lock:
            size = POD_HOST_MAX - POD_HOST_MIN + 1
            for step in range(1, size + 1):
                host = POD_HOST_MIN + (self._last - POD_HOST_MIN + step) % size
                if host not in self._in_use:
                    self._in_use.add(host)
                    self._last = host
                    break
            else:
                raise AddressesExhausted(f"node {self.node.name}: all {size} pod addresses are in use")
        return PodNetwork(
            ip=f"10.233.{self.node.index}.{host}",
            netns=f"{NETNS_PREFIX}p{self.node.index}-{host}",
            host_veth=f"dtv{self.node.index}-{host}",
        )

    def set_up(self, network: PodNetwork) -> None:
        """Create the pod's netns with its veth on the bridge."""
        if network.host_veth is None:
            return
        if network.netns in netns_names() or network.host_veth in link_names():
            # Left over from a crashed agent with the same node index.
            ip_batch([f"link del {network.host_veth}", f"netns del {network.netns}"], check=False)
        ip_batch([
            f"netns add {network.netns}",
            f"link add {network.host_veth} type veth peer name eth0 netns {network.netns}",
            f"link set {network.host_veth} master {self.bridge} up",
        ])
        ip_batch(
            [f"addr add {network.ip}/{PREFIX_LEN} dev eth0", "link set eth0 up", "link set lo up"],
            netns=network.netns,
        )

    def release(self, network: PodNetwork) -> None:
        """Remove the pod's netns and free its address (its processes must be gone)."""
        if network.host_veth is None:
            return
        _kill_netns_processes(network.netns)
        ip_batch([f"link del {network.host_veth}", f"netns del {network.netns}"], check=False)
        with self._lock:
            self._in_use.discard(int(network.ip.rsplit(".", 1)[1]))


def _kill_netns_processes(netns: str) -> None:
    result = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    for pid in result.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
