"""What the pod network's address families allow a job: horovodrun needs IPv4 between pods.

Horovod 0.28 (horovodrun, Gloo) connects the ranks of several pods over IPv4 alone: its
driver takes the IPv4 address of the chief's interface as the Gloo rendezvous address
(``runner/util/network.get_driver_ip``: "Cannot find an IPv4 address of the common
interface"), and its rendezvous and task services listen on IPv4. On a cluster whose pods
have IPv6 addresses only, every step up to horovodrun works (the manager's hosts URL, SSH
to the workers, their readiness) and the job fails only there, after its pods held their
GPUs. So such a job is bad input up front, unless its ranks never leave one pod: one
GPU, or ``--topology kubernetes.io/hostname!`` (one node), where horovodrun runs its
ranks locally over loopback, which has 127.0.0.1 in every pod. With ``--host-network``
the pods have their nodes' addresses instead, which the pod network says nothing of.
Dual-stack pods, either family first, are fine (``tests/e2e/test_ipv6_pods.py``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from distributetrain.core import names
from distributetrain.core.settings import JobSettings

ONE_NODE_LEVEL = f"{names.HOSTNAME_LABEL}!"


def ipv6_only(pod_ips: Iterable[str]) -> bool:
    """Whether a pod's addresses (``status.podIPs``) are all IPv6: none IPv4."""
    families = {ipaddress.ip_address(ip).version for ip in pod_ips if ip}
    return families == {6}


def stays_in_one_pod(settings: JobSettings) -> bool:
    """Whether every rank of the job runs in the chief's pod: one GPU, or one node required."""
    one_node = any(level.required and level.key == names.HOSTNAME_LABEL for level in settings.topology)
    return settings.num_gpus == 1 or one_node


def ipv6_only_refusal(pod_ips: Iterable[str], settings: JobSettings) -> str | None:
    """Why the job cannot run on a pod network of these addresses (the manager pod's), or None."""
    pod_ips = list(pod_ips)
    if settings.host_network or not ipv6_only(pod_ips) or stays_in_one_pod(settings):
        return None
    return (f"the cluster's pods have IPv6 addresses only (the manager's: {', '.join(pod_ips)}) and horovodrun "
            "connects ranks of several pods over IPv4 alone (Horovod's driver and Gloo rendezvous): run the job "
            f"where pods are dual-stack, or keep it on one node with --topology {ONE_NODE_LEVEL}")
