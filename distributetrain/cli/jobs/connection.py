"""Which cluster and namespace the user's commands talk to.

The usual flags (``--kubeconfig``, ``--context``, ``--namespace``), in kubectl's order:
``--kubeconfig``, ``$KUBECONFIG``, ~/.kube/config, and in a pod without any of them its
ServiceAccount and namespace (``kube.uses_in_cluster``). So in a notebook pod the
commands act as the user of its kubeconfig, not as the pod. The namespace defaults to
the kubeconfig context's, else "default".
"""

from __future__ import annotations

import argparse

from kubernetes import config

from distributetrain.cli import jobflags
from distributetrain.cli.jobs.api import JobsKube
from distributetrain.core import errors
from distributetrain.core.clock import Clock
from distributetrain.kube import connection as kube

DEFAULT_NAMESPACE = "default"


def add_connection_flags(parser: argparse.ArgumentParser, namespace: bool = True) -> None:
    """``namespace=False`` where ``jobflags.add_job_flags`` already defines --namespace."""
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config; "
                                              "in a pod without either: its ServiceAccount)")
    cluster.add_argument("--context", help="kubeconfig context (default: the current one)")
    if namespace:
        cluster.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")


def _in_cluster(args: argparse.Namespace) -> bool:
    return kube.uses_in_cluster(args.kubeconfig, args.context, in_cluster_first=False)


def default_namespace(args: argparse.Namespace) -> str:
    """The namespace of the context in use; reads files only, never the API."""
    if _in_cluster(args):
        try:
            with open(jobflags.IN_CLUSTER_NAMESPACE_FILE) as f:
                return f.read().strip() or DEFAULT_NAMESPACE
        except OSError:
            return DEFAULT_NAMESPACE
    try:
        contexts, current = config.list_kube_config_contexts(config_file=args.kubeconfig or kube.kubeconfig_path())
    except (config.ConfigException, OSError):
        return DEFAULT_NAMESPACE  # no kubeconfig: connecting will say so
    context = next((c for c in contexts if c["name"] == args.context), None) if args.context else current
    return ((context or {}).get("context") or {}).get("namespace") or DEFAULT_NAMESPACE


def namespace_of(args: argparse.Namespace) -> str:
    return args.namespace or default_namespace(args)


def connect(args: argparse.Namespace, clock: Clock) -> JobsKube:
    try:
        return JobsKube(kube.load_api_client(args.kubeconfig, args.context, in_cluster_first=False), clock)
    except (config.ConfigException, OSError) as e:
        flag = "--context" if args.context else "--kubeconfig"
        raise errors.UsageError(flag, f"cannot load the cluster's configuration: {e}") from None
