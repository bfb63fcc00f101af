"""Pure builders of the job's NetworkPolicies (--network-policy): nothing but the job's own
pods reaches its pods, and they reach their manager's discovery port.

SSH, Gloo and Horovod's ports are chosen at run time, so the job's pods admit each other
on every port. Ingress only: what the job's pods may reach (a dataset's bucket, a package
index) is the user's business, which the manager cannot know, and an egress rule would
have to admit DNS and the API server of every cluster besides. The kubelet's probes come
from the node, which NetworkPolicy implementations admit. A pod on the node's network
(--host-network) is beyond any NetworkPolicy: such a job gets none.

Istio's ambient mode (a namespace or pod labelled istio.io/dataplane-mode=ambient) changes
two sources, so both are admitted in every job, mesh or not: the kubelet's probes reach a
pod from 169.254.7.127, and traffic between pods arrives on HBONE's port 15008 from the
sending pod's own address (its ztunnel works inside that pod's network namespace). Istio's
"Ambient and Kubernetes NetworkPolicy" page asks exactly for these two exceptions
(istio.io/latest/docs/ambient/usage/networkpolicy/); both stay as narrow as the rest: the
probe's address on the probed port only, HBONE from the job's own pods only. The
link-local address is the node's alone (RFC 3927: never routed beyond it).
"""

from __future__ import annotations

from collections.abc import Callable

from distributetrain.core.pods import manifests
from distributetrain.core import names
from distributetrain.core.settings import JobSettings

API_VERSION = "networking.k8s.io/v1"
ROLE_NETWORK_POLICY = "network-policy"
# Istio ambient: the address its node agent gives the kubelet's probes (SNAT), and the
# port of its HBONE tunnel between pods (istio.io/latest/docs/ambient/usage/networkpolicy/).
AMBIENT_PROBE_SOURCE_CIDR = "169.254.7.127/32"
HBONE_PORT = 15008


def _job_pods(settings: JobSettings) -> dict:
    """This run's pods of the job (never an earlier run's of the same name)."""
    labels = {names.LABEL_JOB: settings.job_name}
    if settings.owner_uid:
        labels[names.LABEL_OWNER_UID] = settings.owner_uid
    return {"matchLabels": labels}


def _metadata(settings: JobSettings, name: str) -> dict:
    """Owned by the manager pod like every object of the job (``manifests.owner_references``)."""
    metadata = {"name": name, "namespace": settings.namespace,
                "labels": names.job_labels(settings.job_name, ROLE_NETWORK_POLICY, settings.owner_uid)}
    owners = manifests.owner_references(settings)
    if owners:
        metadata["ownerReferences"] = owners
    return metadata


def pods_policy(settings: JobSettings) -> dict:
    """The job's pods admit the job's own pods alone, on every port (HBONE's too), and the
    kubelet's readiness probe of the workers' sshd as Istio ambient rewrites it."""
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": _metadata(settings, names.pods_policy_name(settings.job_name)),
        "spec": {
            "podSelector": _job_pods(settings),
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": _job_pods(settings)}]},
                        {"from": [{"ipBlock": {"cidr": AMBIENT_PROBE_SOURCE_CIDR}}],
                         "ports": [{"protocol": "TCP", "port": settings.port}]}],
        },
    }


def manager_policy(settings: JobSettings) -> dict:
    """The manager pod admits the job's pods on its discovery port alone (and HBONE's, which
    carries it in Istio ambient). It is selected by the label with its UID it puts on
    itself (``manager_label``)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": _metadata(settings, names.manager_policy_name(settings.job_name)),
        "spec": {
            "podSelector": {"matchLabels": manager_label(settings)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": _job_pods(settings)}],
                         "ports": [{"protocol": "TCP", "port": names.DISCOVERY_PORT},
                                   {"protocol": "TCP", "port": HBONE_PORT}]}],
        },
    }


def manager_label(settings: JobSettings) -> dict[str, str]:
    return {names.LABEL_MANAGER_UID: settings.owner_uid}


def _wanted(settings: JobSettings) -> list[tuple[str, Callable[[JobSettings], dict]]]:
    """The job's NetworkPolicies by name, each with its builder, in creation order; none
    with --network-policy false or --host-network. The manager's only where it runs in the
    job's namespace (and knows its UID): elsewhere its Role does not cover it, and that
    namespace's own rules must admit the chief."""
    if not settings.network_policy or settings.host_network:
        return []
    wanted = [(names.pods_policy_name(settings.job_name), pods_policy)]
    if settings.owns_objects:
        wanted.append((names.manager_policy_name(settings.job_name), manager_policy))
    return wanted


def job_policies(settings: JobSettings) -> list[dict]:
    """The job's NetworkPolicies, in creation order (``_wanted``)."""
    return [build(settings) for _, build in _wanted(settings)]


def policy_names(settings: JobSettings) -> list[str]:
    """The names of ``job_policies``, what teardown looks for."""
    return [name for name, _ in _wanted(settings)]
