"""`python -m localcluster up|down|status`: the local cluster from the shell.

`nodeclaim launch|boot|delete|list` is the local cloud's API, for Karpenter's cloud
provider (localcluster/karpentercontroller), not for people: JSON on stdin and stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from localcluster import binaries, networkpolicy, nodeclaims, profiles, versions
from localcluster.cluster import Cluster
from localcluster.clusterstatus import ClusterStatus
from localcluster.errors import ClusterError
from localcluster.node.config import DEFAULT_GPU_RESOURCE
from localcluster.layout import RunLayout
from localcluster.nodegroups import NODE_SPEC_FORMAT, NodeAllocationError, parse_node_spec

PULL_DELAYS_FORMAT = "IMAGE=SECONDS[,...], e.g. distributetrain/base:0.1.0=60"
EXIT_BAD_INPUT = 2

T = TypeVar("T")


class BadInput(ValueError):
    """A command-line value that cannot be used; the message names the flag and the valid form."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.handler(args)
    except BadInput as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ClusterError, NodeAllocationError, PermissionError, TimeoutError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def _up(args: argparse.Namespace) -> int:
    started = time.monotonic()
    # Every value is checked before anything starts, so bad input creates nothing.
    nodes, profiled, hostnames = _nodes(args)
    labels = _checked("--labels", _parse_labels, args.labels)
    slow = _checked("--slow-registry", parse_pull_delays, args.slow_registry) if args.slow_registry else None
    kubernetes = _checked(f"--kubernetes (or {versions.ENV})", versions.parse,
                          args.kubernetes or os.environ.get(versions.ENV) or versions.DEFAULT)
    if args.karpenter_boot_delay is not None and not 0 <= args.karpenter_boot_delay < float("inf"):
        raise BadInput(f"--karpenter-boot-delay: must be seconds, 0 or more, got {args.karpenter_boot_delay:g}")
    cluster = Cluster.up(nodes, labels, args.gpu_resource, hostnames=hostnames, pull_delays=slow, kueue=args.kueue,
                         karpenter=args.karpenter, karpenter_boot_delay_s=args.karpenter_boot_delay,
                         kubernetes=kubernetes, dra=args.dra)
    if profiled and not any(set(group.names) == set(profiled) for group in cluster.node_groups()):
        cluster.add_node_specs(profiles.node_specs(profiled, labels, hostnames))
    if args.network_policy:
        networkpolicy.enforce_everywhere(cluster.node_groups(), binaries.kube_router())
    print(f"cluster up in {time.monotonic() - started:.1f} s; export KUBECONFIG={cluster.kubeconfig}")
    return 0


def _nodes(args: argparse.Namespace) -> tuple[dict[str, int] | None, dict[str, profiles.NodeProfile], dict[str, str]]:
    """--nodes as GPUs by node name, or, with --profile, as each node's profile; and the
    hostname labels given."""
    if not args.profile:
        nodes, hostnames = _checked("--nodes", parse_node_spec, args.nodes) if args.nodes else (None, {})
        return nodes, {}, hostnames
    profile = _checked("--profile", profiles.node_profile, args.profile)
    if not args.nodes:
        raise BadInput("--profile: give the nodes it makes with --nodes NAME[/HOSTNAME][,...]")
    profiled, hostnames = _checked("--nodes", lambda text: profiles.parse_nodes(text, profile), args.nodes)
    return None, profiled, hostnames


def _checked(flag: str, parse: Callable[[str], T], text: str) -> T:
    try:
        return parse(text)
    except ValueError as error:
        raise BadInput(f"{flag}: {error}") from error


def parse_pull_delays(text: str) -> dict[str, float]:
    """Parse "distributetrain/base:0.1.0=60,other:1=5" into {image: seconds}."""
    delays = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        image, sep, seconds = item.rpartition("=")
        try:
            delay_s = float(seconds)
        except ValueError:
            delay_s = -1.0
        if not sep or not image or not 0 <= delay_s < float("inf"):
            raise ValueError(f"bad pull delay {item!r}; please use the format {PULL_DELAYS_FORMAT}")
        delays[image] = delay_s
    return delays


def _down(args: argparse.Namespace) -> int:
    swept = Cluster(RunLayout.from_env()).down(purge=args.purge, keep_state=args.keep_state)
    if not swept.empty():
        print(f"removed leftovers: {swept}")
    print("cluster down")
    return 0


def _status(args: argparse.Namespace) -> int:
    _print_status(Cluster(RunLayout.from_env()).status())
    return 0


def _print_status(status: ClusterStatus) -> None:
    for component in status.components:
        state = f"running (pid {component.pid})" if component.pid else "stopped"
        print(f"{component.name:<24} {state}")
    print(f"{'apiserver /readyz':<24} {'ok' if status.apiserver_ready else 'not ready'}")
    for group in status.node_groups:
        print(f"node group {group.group_id}: {', '.join(group.names)} (indices {group.first_index}..)")
    for node in status.nodes:
        print(f"node {node.name:<19} {'Ready' if node.ready else 'NotReady':<9} gpus={node.gpus}")


def _nodeclaim_launch(args: argparse.Namespace) -> int:
    try:
        document = json.load(sys.stdin)
    except json.JSONDecodeError as error:
        raise BadInput(f"nodeclaim launch: stdin is not the launch's JSON: {error}") from error
    instance = nodeclaims.Instances(RunLayout.from_env()).launch(document, nodeclaims.python_executable())
    print(json.dumps(instance.document))
    return 0


def _nodeclaim_boot(args: argparse.Namespace) -> int:
    nodeclaims.boot(Cluster(RunLayout.from_env()), args.name)
    return 0


def _nodeclaim_delete(args: argparse.Namespace) -> int:
    existed = nodeclaims.delete(Cluster(RunLayout.from_env()), args.name)
    print(json.dumps({"name": args.name, "existed": existed}))
    return 0


def _nodeclaim_list(args: argparse.Namespace) -> int:
    print(json.dumps([instance.document for instance in nodeclaims.Instances(RunLayout.from_env()).list()]))
    return 0


def _parse_labels(text: str) -> dict[str, str]:
    labels = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"bad label {item!r}; please use the format key=value[,key2=value2]")
        labels[key] = value
    return labels


def _add_up_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--nodes", default="", help=(
        f"node group to add: {NODE_SPEC_FORMAT}. NAME/HOSTNAME gives the Node a kubernetes.io/hostname "
        "label other than its name, as on EKS (Karpenter) or kops/OpenStack"))
    up.add_argument("--labels", default="", help="labels for those nodes, e.g. pool=a,zone=z1")
    up.add_argument("--profile", default="", metavar="PROFILE", help=(
        f"make those nodes look as a platform sets them up (labels, taints, GPU resources): "
        f"{profiles.PROFILE_FORMAT}; profiles: {', '.join(profiles.PROFILES)}. --nodes then names them only"))
    up.add_argument("--gpu-resource", default=DEFAULT_GPU_RESOURCE)
    up.add_argument("--dra", action="store_true", help=(
        "the --nodes group's GPUs are DRA devices of DeviceClass gpu.example.com, published by the example "
        "DRA driver's kubelet plugin beside each kubelet, not the --gpu-resource extended resource"))
    up.add_argument("--kubernetes", default="", metavar="MAJOR.MINOR", help=(
        f"the Kubernetes release to run (default: ${versions.ENV}, else {versions.DEFAULT}): one of "
        f"{', '.join(map(str, versions.supported()))}, built on first use (10-25 minutes)"))
    up.add_argument("--kueue", action="store_true",
                    help="run Kueue too (its CRDs, webhooks and controller manager): batch queueing for --queue")
    up.add_argument("--karpenter", action="store_true",
                    help="run Karpenter too (its CRDs and controller, with a local cloud provider): a real node "
                         "per NodeClaim, for NodePools of KWOKNodeClass")
    up.add_argument("--network-policy", action="store_true",
                    help="enforce NetworkPolicies on every node up now (kube-router, built on first use); "
                         "nodes added later by `up --nodes` too, when it is given again")
    up.add_argument("--karpenter-boot-delay", type=float, default=None, metavar="SECONDS", help=(
        "how long a Karpenter node takes to come up, for the default instance types (default "
        "120: a cloud GPU node's minutes; a NodeClass's nodeRegistrationDelay overrides it)"))
    up.add_argument("--slow-registry", default="", metavar="DELAYS", help=(
        f"make the registry slow to serve these images: {PULL_DELAYS_FORMAT} (seconds per image, as pods "
        "name it; a node pulls an image once, later pods there find it present). Replaces the delays set before"))
    up.set_defaults(handler=_up)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    _add_up_arguments(commands.add_parser("up", help="start the cluster (or attach); optionally add nodes"))
    down = commands.add_parser("down", help="stop everything and remove what is left")
    kept = down.add_mutually_exclusive_group()
    kept.add_argument("--purge", action="store_true", help="also delete the run directory ($DT_RUN)")
    kept.add_argument("--keep-state", action="store_true", help=(
        "keep the API's objects (etcd's data) for the next `up` to serve again; by default they go, "
        "so the next `up` starts with none of this run's pods"))
    down.set_defaults(handler=_down)
    status = commands.add_parser("status", help="print components and nodes")
    status.set_defaults(handler=_status)
    nodeclaim = commands.add_parser("nodeclaim", help="the local cloud of Karpenter's provider (JSON in, JSON out)")
    actions = nodeclaim.add_subparsers(required=True, metavar="ACTION")
    actions.add_parser("launch", help="start the node the JSON on stdin describes; print its instance").set_defaults(
        handler=_nodeclaim_launch)
    boot = actions.add_parser("boot", help="(the booter launch starts) wait out the boot delay, start the node")
    boot.add_argument("name")
    boot.set_defaults(handler=_nodeclaim_boot)
    delete = actions.add_parser("delete", help="stop the node and delete its Node")
    delete.add_argument("name")
    delete.set_defaults(handler=_nodeclaim_delete)
    actions.add_parser("list", help="print the instances").set_defaults(handler=_nodeclaim_list)
    return parser


if __name__ == "__main__":
    sys.exit(main())
