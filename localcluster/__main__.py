"""`python -m localcluster up|down|status`: the local cluster from the shell."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from localcluster.cluster import DEFAULT_GPU_RESOURCE, Cluster, ClusterError, ClusterStatus
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
    nodes, hostnames = _checked("--nodes", parse_node_spec, args.nodes) if args.nodes else (None, {})
    labels = _checked("--labels", _parse_labels, args.labels)
    slow = _checked("--slow-registry", parse_pull_delays, args.slow_registry) if args.slow_registry else None
    cluster = Cluster.up(nodes, labels, args.gpu_resource, hostnames=hostnames, pull_delays=slow, kueue=args.kueue)
    print(f"cluster up in {time.monotonic() - started:.1f} s; export KUBECONFIG={cluster.kubeconfig}")
    return 0


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
    swept = Cluster(RunLayout.from_env()).down(purge=args.purge)
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


def _parse_labels(text: str) -> dict[str, str]:
    labels = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"bad label {item!r}; please use the format key=value[,key2=value2]")
        labels[key] = value
    return labels


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    up = commands.add_parser("up", help="start the cluster (or attach); optionally add nodes")
    up.add_argument("--nodes", default="", help=(
        f"node group to add: {NODE_SPEC_FORMAT}. NAME/HOSTNAME gives the Node a kubernetes.io/hostname "
        "label other than its name, as on EKS (Karpenter) or kops/OpenStack"))
    up.add_argument("--labels", default="", help="labels for those nodes, e.g. pool=a,zone=z1")
    up.add_argument("--gpu-resource", default=DEFAULT_GPU_RESOURCE)
    up.add_argument("--kueue", action="store_true",
                    help="run Kueue too (its CRDs, webhooks and controller manager): batch queueing for --queue")
    up.add_argument("--slow-registry", default="", metavar="DELAYS", help=(
        f"make the registry slow to serve these images: {PULL_DELAYS_FORMAT} (seconds per image, as pods "
        "name it; a node pulls an image once, later pods there find it present). Replaces the delays set before"))
    up.set_defaults(handler=_up)
    down = commands.add_parser("down", help="stop everything and remove what is left")
    down.add_argument("--purge", action="store_true", help="also delete the run directory ($DT_RUN)")
    down.set_defaults(handler=_down)
    status = commands.add_parser("status", help="print components and nodes")
    status.set_defaults(handler=_status)
    return parser


if __name__ == "__main__":
    sys.exit(main())
