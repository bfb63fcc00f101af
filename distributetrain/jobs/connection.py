"""Which cluster and namespace the user's commands talk to.

The usual flags (``--kubeconfig``, ``--context``, ``--namespace``); inside a pod, the
in-cluster config and the pod's own namespace, as ``distributetrain.kube`` does for the
manager. The namespace defaults to the kubeconfig context's, else "default".
"""

from __future__ import annotations

import argparse
import os

from kubernetes import config

from distributetrain import errors, jobflags
from distributetrain.jobs.api import JobsKube
from distributetrain.kube import load_api_client

DEFAULT_NAMESPACE = "default"
IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"  # set in every pod; what load_incluster_config reads


def add_connection_flags(parser: argparse.ArgumentParser, namespace: bool = True) -> None:
    """``namespace=False`` where ``jobflags.add_job_flags`` already defines --namespace."""
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config; "
                                              "in a pod: the in-cluster config)")
    cluster.add_argument("--context", help="kubeconfig context (default: the current one)")
    if namespace:
        cluster.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")


def _in_cluster(args: argparse.Namespace) -> bool:
    return args.kubeconfig is None and args.context is None and bool(os.environ.get(IN_CLUSTER_ENV))


def default_namespace(args: argparse.Namespace) -> str:
    """The namespace of the context in use; reads files only, never the API."""
    if _in_cluster(args):
        try:
            with open(jobflags.IN_CLUSTER_NAMESPACE_FILE) as f:
                return f.read().strip() or DEFAULT_NAMESPACE
        except OSError:
            return DEFAULT_NAMESPACE
    try:
        contexts, current = config.list_kube_config_contexts(config_file=args.kubeconfig)
    except (config.ConfigException, OSError):
        return DEFAULT_NAMESPACE  # no kubeconfig: connecting will say so
    context = next((c for c in contexts if c["name"] == args.context), None) if args.context else current
    return ((context or {}).get("context") or {}).get("namespace") or DEFAULT_NAMESPACE


def namespace_of(args: argparse.Namespace) -> str:
    return args.namespace or default_namespace(args)


def connect(args: argparse.Namespace) -> JobsKube:
    try:
        return JobsKube(load_api_client(args.kubeconfig, args.context))
    except (config.ConfigException, OSError) as e:
        flag = "--context" if args.context else "--kubeconfig"
        raise errors.UsageError(flag, f"cannot load the cluster's configuration: {e}") from None
