"""The node agent's settings, parsed and validated once at the command line.

The cluster launcher starts one agent per node group with a fixed command line
(see `localcluster/cluster.py`); everything the agent needs to know about its
nodes, the host network and its credentials is decided here, so the rest of the
agent works with plain frozen values instead of strings.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

NODE_INDEX_MIN = 1
NODE_INDEX_MAX = 240
# Node i's own address on the bridge is 10.233.0.(NODE_IP_OFFSET + i).
NODE_IP_OFFSET = 10
CLUSTER_NETWORK = ipaddress.ip_network("10.233.0.0/16")
NETNS_PREFIX = "dt-"

_NODE_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# The kubelet derives kubernetes.io/hostname from the machine's hostname (lowercased): a label value.
_HOSTNAME_RE = re.compile(r"^[a-z0-9]([-.a-z0-9]{0,61}[a-z0-9])?$")
NODE_FORMAT = "name[/hostname]=gpus,... (e.g. gpu-a=4,ip-10-0-1-7.ec2.internal/ip-10-0-1-7=2)"


@dataclass(frozen=True)
class NodeSpec:
    """One node this agent runs: its name, fake GPU count and network index.

    `hostname` is the machine's hostname, hence its `kubernetes.io/hostname` label: the
    name unless told otherwise. On EKS (Karpenter) or kops/OpenStack they differ: Node
    `ip-10-0-1-7.ec2.internal` has the label `ip-10-0-1-7`.
    """

    name: str
    gpus: int
    index: int
    hostname: str = ""

    def __post_init__(self) -> None:
        if not self.hostname:
            object.__setattr__(self, "hostname", self.name)

    @property
    def ip(self) -> str:
        """The node's address inside its own netns (hostNetwork pods use it too)."""
        return str(CLUSTER_NETWORK.network_address + NODE_IP_OFFSET + self.index)

    @property
    def pod_cidr(self) -> str:
        return f"10.233.{self.index}.0/24"

    @property
    def netns(self) -> str:
        return f"{NETNS_PREFIX}n{self.index}"

    @property
    def host_veth(self) -> str:
        return f"dtn{self.index}"


@dataclass(frozen=True)
class AgentSettings:
    """Everything the agent was told on its command line.

    kubeconfig: credentials for the apiserver (admin is acceptable here).
    nodes: the nodes to register, in --nodes order, with their indices.
    labels: extra labels for every node.
    taints: taints every node registers with (e.g. nvidia.com/gpu=present:NoSchedule, as GKE's GPU pools).
    gpu_resource: the extended resource name that carries the fake GPUs.
    state_dir: where pod files, logs and the `ready` marker live.
    bridge: the host bridge node and pod namespaces attach to.
    apiserver_host/port: what pods see as KUBERNETES_SERVICE_HOST/PORT.
    ca_file: the cluster CA, served to pods as ca.crt next to their token.
    kubelet_cert/key/port: the kubelet API (container logs) the apiserver proxies to.
    pull_delays_file: the cluster's {image: seconds} of slow pulls (controls.py); None: pulls are instant.
    """

    kubeconfig: Path
    nodes: tuple[NodeSpec, ...]
    labels: dict[str, str]
    gpu_resource: str
    state_dir: Path
    bridge: str
    apiserver_host: str
    apiserver_port: int
    ca_file: Path
    kubelet_cert: Path
    kubelet_key: Path
    kubelet_port: int
    taints: tuple[dict[str, str], ...] = ()
    pull_delays_file: Path | None = None

    @property
    def ready_file(self) -> Path:
        return self.state_dir / "ready"

    @property
    def pods_dir(self) -> Path:
        return self.state_dir / "pods"


def parse_nodes(text: str, first_index: int) -> tuple[NodeSpec, ...]:
    """Parse `gpu-a=4,ip-10-0-1-7.ec2.internal/ip-10-0-1-7=2` into nodes numbered from first_index."""
    nodes = []
    for position, item in enumerate(filter(None, text.split(","))):
        names, sep, count = item.partition("=")
        name, slash, hostname = names.partition("/")
        hostname = hostname if slash else name
        if not sep or not _NODE_NAME_RE.match(name) or not _HOSTNAME_RE.match(hostname) or not count.isdigit():
            raise ValueError(f"bad node {item!r}: please use the format {NODE_FORMAT}")
        index = first_index + position
        if not NODE_INDEX_MIN <= index <= NODE_INDEX_MAX:
            raise ValueError(f"node {name} would get index {index}, outside {NODE_INDEX_MIN}..{NODE_INDEX_MAX}")
        nodes.append(NodeSpec(name=name, gpus=int(count), index=index, hostname=hostname))
    if not nodes:
        raise ValueError(f"no nodes given: please use the format {NODE_FORMAT}")
    names = [node.name for node in nodes]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate node names in {text!r}")
    return tuple(nodes)


def parse_labels(text: str) -> dict[str, str]:
    """Parse `k=v,k2=v2`; an empty string means no labels."""
    labels = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"bad label {item!r}: please use the format key=value,key2=value2")
        labels[key] = value
    return labels


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def parse_taints(text: str) -> tuple[dict[str, str], ...]:
    """Parse `key[=value]:Effect,...` (kubectl taint's form) into Node taints; empty means none."""
    taints = []
    for item in filter(None, text.split(",")):
        key_value, sep, effect = item.rpartition(":")
        key, _, value = key_value.partition("=")
        if not sep or not key or effect not in TAINT_EFFECTS:
            raise ValueError(f"bad taint {item!r}: please use the format key[=value]:"
                             f"{'|'.join(TAINT_EFFECTS)},... (e.g. nvidia.com/gpu=present:NoSchedule)")
        taints.append({"key": key, **({"value": value} if value else {}), "effect": effect})
    return tuple(taints)


def parse_args(argv: list[str] | None = None) -> AgentSettings:
    parser = argparse.ArgumentParser(prog="python -m localcluster.agent", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--nodes", required=True, help="name=gpus,... e.g. gpu-a=4,gpu-b=2")
    parser.add_argument("--first-index", required=True, type=int, help="network index of the first node")
    parser.add_argument("--labels", default="", help="k=v,... added to every node")
    parser.add_argument("--taints", default="", help="key[=value]:Effect,... every node registers with")
    parser.add_argument("--gpu-resource", default="nvidia.com/gpu")
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--bridge", default="dtbr0")
    parser.add_argument("--apiserver-host", default="10.233.0.1")
    parser.add_argument("--apiserver-port", default=6443, type=int)
    parser.add_argument("--ca-file", required=True, type=Path)
    parser.add_argument("--kubelet-cert", required=True, type=Path)
    parser.add_argument("--kubelet-key", required=True, type=Path)
    parser.add_argument("--kubelet-port", default=10250, type=int)
    parser.add_argument("--pull-delays-file", type=Path, help="JSON {image: seconds} of slow image pulls")
    args = parser.parse_args(argv)
    try:
        return AgentSettings(
            kubeconfig=args.kubeconfig,
            nodes=parse_nodes(args.nodes, args.first_index),
            labels=parse_labels(args.labels),
            taints=parse_taints(args.taints),
            gpu_resource=args.gpu_resource,
            state_dir=args.state_dir.resolve(),
            bridge=args.bridge,
            apiserver_host=args.apiserver_host,
            apiserver_port=args.apiserver_port,
            ca_file=args.ca_file,
            kubelet_cert=args.kubelet_cert,
            kubelet_key=args.kubelet_key,
            kubelet_port=args.kubelet_port,
            pull_delays_file=args.pull_delays_file,
        )
    except ValueError as error:
        parser.error(str(error))
