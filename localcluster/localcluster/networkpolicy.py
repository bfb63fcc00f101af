"""NetworkPolicies enforced on the local cluster (`up --network-policy`, the network-policy
test): kube-router as each node's NetworkPolicy controller, and nothing else of it.

kube-router (built from its Go module, localcluster/kuberoutercontroller, on first use)
runs in the node's netns and cgroup like its other daemons, with only its firewall on
(no routing, no service proxy: kube-proxy serves Services). It writes iptables rules and
ipsets in that netns, with the `iptables` kube-proxy uses (nf_tables here). Pods sit
behind the node's `cni0` bridge: traffic between two pods of one node is bridged, and
reaches iptables through br_netfilter (`bridge-nf-call-iptables`, set to 1 in the node's
netns); traffic from another node is routed through the node's FORWARD chain.
Rejected connections are refused (REJECT), not left to time out.

Stopping a node kills kube-router with the rest of the node's cgroup, and removing its
netns removes its rules and ipsets. Not tried here: sigs.k8s.io/kube-network-policies,
which needs nftables' queue (`CONFIG_NFT_QUEUE`), which this machine's kernel lacks.
kube-router v2.1.0 has known security flaws: acceptable inside this test cluster only.
It is given the admin's credentials (one local cluster, torn down after the tests).
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from localcluster import certs, kubeconfig, netsetup, processes
from localcluster.components import APISERVER_PORT
from localcluster.node import cgroups, network
from localcluster.node.realnode import RealNode
from localcluster.probe import wait_until

log = logging.getLogger(__name__)

DAEMON = "kube-router"
# Logged (at -v 1) after each sync of the rules with the cluster's policies and pods.
SYNCED = b"sync iptables took"
SYNC_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
SYSCTL_TIMEOUT_S = 30.0
BRIDGED_TO_IPTABLES = "net.bridge.bridge-nf-call-iptables=1"


def command(binary: Path, kubeconfig_file: Path, node_name: str) -> list[str]:
    """kube-router as a NetworkPolicy controller only, for one node."""
    return [str(binary), "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
            f"--kubeconfig={kubeconfig_file}", f"--hostname-override={node_name}",
            f"--service-cluster-ip-range={netsetup.SERVICE_CIDR}",
            # Its health and metrics servers would claim ports of the node's netns for nothing.
            "--health-port=0", "--metrics-port=0", "--v=1"]


def _pid_file(node: RealNode) -> Path:
    # Under the node's root: removed with the node, so no stale pid outlives it.
    return node.paths.root / f"{DAEMON}.pid"


def start(node: RealNode, binary: Path) -> None:
    """Start kube-router in the node's netns and cgroup; return once it has synced its rules."""
    pki = certs.Pki(node.layout.pki)
    kubeconfig_file = node.paths.root / f"{DAEMON}.kubeconfig"
    kubeconfig.write(kubeconfig_file, kubeconfig.render(pki, certs.ADMIN, f"https://{netsetup.HOST_IP}:{APISERVER_PORT}"))
    # Bridged traffic (two pods of one node) reaches iptables only so; 1 by default here, but per netns.
    subprocess.run(["ip", "netns", "exec", node.spec.netns, "sysctl", "-q", "-w", BRIDGED_TO_IPTABLES],
                   check=True, capture_output=True, timeout=SYSCTL_TIMEOUT_S)
    argv = command(binary, kubeconfig_file, node.spec.name)
    log_file = node.log_file(DAEMON)
    offset = log_file.stat().st_size if log_file.exists() else 0
    pid = processes.start_detached(["nsenter", f"--net={network.netns_path(node.spec)}", "--", *argv],
                                   _pid_file(node), log_file, cwd=node.paths.root,
                                   env=processes.environment_without_proxy(), program=argv[0])
    cgroups.join_daemons(node.spec.cgroup, pid)

    def synced() -> bool:
        if not processes.alive(pid):
            raise RuntimeError(f"kube-router of node {node.spec.name} exited; see {log_file}")
        with open(log_file, "rb") as stream:
            stream.seek(offset)
            return SYNCED in stream.read()

    wait_until(synced, SYNC_TIMEOUT_S, f"kube-router of node {node.spec.name} to sync its rules")
    log.info("node %s: kube-router enforces NetworkPolicies", node.spec.name)


def stop(node: RealNode) -> None:
    """Stop the node's kube-router (its rules stay until the netns goes: the node stops after)."""
    pid = processes.read_pid(_pid_file(node))
    if pid is not None:
        processes.stop(pid, f"{DAEMON} of {node.spec.name}", STOP_TIMEOUT_S)
    _pid_file(node).unlink(missing_ok=True)


def running(node: RealNode) -> bool:
    return processes.read_pid(_pid_file(node)) is not None


def enforce_everywhere(groups: Sequence, binary: Path) -> None:
    """kube-router on every node of ``groups`` that does not run it yet (`up --network-policy`)."""
    for group in groups:
        for node in group.nodes():
            if not running(node):
                start(node, binary)


@contextlib.contextmanager
def enforced(nodes: Sequence[RealNode], binary: Path) -> Iterator[None]:
    """kube-router on each of ``nodes`` for the block; stopped on exit."""
    try:
        for node in nodes:
            start(node, binary)
        yield
    finally:
        for node in nodes:
            stop(node)
