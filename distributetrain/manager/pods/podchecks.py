"""Pre-flight checks of what the job's pods need of the cluster besides their own spec:
the Secrets their environment comes from (``core/pods/envsecrets``), the image pull Secrets
they name, and a pod network horovodrun can run on. Each failure
is bad input (exit 2) before anything is created.

A pod naming a missing pull Secret is created all the same; the kubelet pulls without it
and, from a private registry, fails (ErrImagePull) after the other pods took their GPUs.
The manager reads the Secret with the ``secrets: get`` its Role grants for the job's own
SSH keys and ``--env-from-secret`` (no new permission), and reads its own pod's addresses.
"""

from __future__ import annotations

import logging

from distributetrain.core.pods import envsecrets, podnetwork
from distributetrain.core import errors
from distributetrain.core.settings import JobSettings
from distributetrain.kube.api import KubeApi

log = logging.getLogger(__name__)

PULL_SECRET_FLAG = "--image-pull-secret"
# The Secret types the kubelet reads registry credentials from (its .dockerconfigjson or
# .dockercfg key); it skips any other.
PULL_SECRET_TYPES = ("kubernetes.io/dockerconfigjson", "kubernetes.io/dockercfg")


def require_env_secrets(kube: KubeApi, settings: JobSettings) -> None:
    """Raise UsageError naming the first Secret of ``--env-from-secret`` not in the job's namespace."""
    for name in settings.env_from_secrets:
        if kube.read("Secret", settings.namespace, name) is None:
            raise envsecrets.missing_secret(name, settings.namespace)


def require_pull_secrets(kube: KubeApi, settings: JobSettings) -> None:
    """Raise UsageError naming the first ``--image-pull-secret`` missing from the job's
    namespace, or of a type the kubelet does not pull with."""
    namespace = settings.namespace
    for name in settings.image_pull_secrets:
        secret = kube.read("Secret", namespace, name)
        if secret is None:
            raise errors.UsageError(PULL_SECRET_FLAG, (
                f"no Secret {name!r} in namespace {namespace!r} (create it there first, e.g. kubectl create secret "
                f"docker-registry {name} -n {namespace} --docker-server=REGISTRY --docker-username=USER "
                "--docker-password=TOKEN)"))
        if secret.get("type") not in PULL_SECRET_TYPES:
            raise errors.UsageError(PULL_SECRET_FLAG, (
                f"Secret {name!r} is of type {secret.get('type')!r}; the kubelet pulls only with "
                f"{' or '.join(PULL_SECRET_TYPES)} Secrets (kubectl create secret docker-registry)"))


def require_ipv4_between_pods(kube: KubeApi, settings: JobSettings) -> None:
    """Raise UsageError when the pod network (the manager pod's own addresses) is IPv6 alone
    and the job's ranks would span pods (``podnetwork``)."""
    if not settings.owner_uid:
        return  # no manager pod to read (a manager run by hand)
    pod = kube.read("Pod", settings.own_namespace, settings.job_name) or {}
    status = pod.get("status") or {}
    addresses = [entry.get("ip", "") for entry in status.get("podIPs") or ()] or [status.get("podIP", "")]
    if why := podnetwork.ipv6_only_refusal(addresses, settings):
        raise errors.UsageError("--topology", why)
