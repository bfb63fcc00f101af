"""Delete everything a job created: at its end, on any path out (safe to run twice), and
an attempt's, released before the next one plans (``release_attempt``)."""

from __future__ import annotations

import logging

from distributetrain.core import errors, names
from distributetrain.core.pods import networkpolicy
from distributetrain.core.placement import podstate
from distributetrain.core.settings import JobSettings
from distributetrain.kube.api import KubeApi
from distributetrain.manager.watching import podwaits
from distributetrain.manager.processstate import ProcessState

log = logging.getLogger(__name__)

# How long a lost attempt's pods may take to go before the next attempt plans anyway:
# their grace period (--termination-grace-period), and this for the kubelet to confirm.
# One on a dead node may never go; its node is not a candidate for the next plan either.
OLD_PODS_GONE_SLACK_S = 20.0


def old_pods_gone_s(settings: JobSettings) -> float:
    return settings.termination_grace_period_s + OLD_PODS_GONE_SLACK_S


def release_attempt(kube: KubeApi, state: ProcessState) -> None:
    """Delete the attempt's pods and wait (bounded) until they are gone: until then the
    scheduler counts their GPUs as used, so a job that fills its cluster would find no room
    for its next attempt."""
    settings = state.settings
    state.hosts.publish(None)
    tear_down(kube, settings, keep_chief=False)
    state.pods.relist()  # judged from after the deletions: those done at once are gone from it
    gone_within_s = old_pods_gone_s(settings)
    if left := podwaits.wait_until_gone(state.pods, state.clock.monotonic() + gone_within_s):
        log.warning("job %s: %s still terminating after %.0fs (a lost node?); planning without their GPUs",
                    settings.job_name, ", ".join(sorted(left)), gone_within_s)


def tear_down(kube: KubeApi, settings: JobSettings, keep_chief: bool) -> list[str]:
    """Delete the job's workers, chief, ResourceClaimTemplates, PodGroups, Secret and
    NetworkPolicies;     return what was deleted.

    ``keep_chief`` keeps a *finished* chief for its logs (only the last attempt's can be
    left: each lost attempt is torn down whole); a chief still running (its manager died
    mid-job), or one whose training ended beside a classic sidecar that runs on (a service
    mesh's proxy), is deleted, or it would hold its GPUs to the end.
    """
    deleted = [f"pod/{name}" for name in _delete_pods(kube, settings, keep_chief)]
    if settings.device_class:
        deleted += _delete_collection(kube, settings, "ResourceClaimTemplate")
    if kube.serves_pod_groups():
        deleted += _delete_collection(kube, settings, "PodGroup")
    return deleted + _delete_named(kube, settings)


def _delete_collection(kube: KubeApi, settings: JobSettings, kind: str) -> list[str]:
    """This run's objects of ``kind`` by its labels, in one request, as "kind/name": its
    PodGroups (``core.pods.gang``; each goes once its pods are gone), the templates of its
    pods' GPUs on DRA nodes (``gpuclaims``; the claims made from them go with their pods).
    None where the cluster serves no such kind; refused (an older rbac/), they go with the
    manager pod that owns them."""
    try:
        gone = kube.delete_collection(kind, settings.namespace, settings.selector)
    except errors.NotFound:
        return []
    except errors.Forbidden as e:
        log.warning("job %s: cannot delete its %ss (%s); they are deleted with the manager pod",
                    settings.job_name, kind, e)
        return []
    return [f"{kind.lower()}/{name}" for name in gone]


def _delete_pods(kube: KubeApi, settings: JobSettings, keep_chief: bool) -> list[str]:
    """The job's pods but a kept chief (``tear_down``), in one request, not one each: at 64
    workers, one delete per pod is most of the manager's overhead. The request selects this
    manager's workers and chief (``settings.selector``: the job and owner-uid labels; the
    role, so never another pod of the job's name) but the kept one; pods already
    terminating are selected again, which changes nothing. A Role without
    ``pods: deletecollection`` (an older rbac/) gets one delete per pod."""
    pods, _ = kube.list_all("Pod", settings.namespace, label_selector=settings.selector)
    doomed, kept = [], []
    for pod in filter(podstate.is_training_pod, pods):
        name = pod["metadata"]["name"]
        if keep_chief and podstate.role(pod) == names.ROLE_CHIEF and podstate.ends_on_its_own(pod):
            kept.append(name)
        elif not pod["metadata"].get("deletionTimestamp"):
            doomed.append(name)
    if not doomed:
        return []
    selector = f"{settings.selector},{names.LABEL_ROLE} in ({names.ROLE_CHIEF},{names.ROLE_WORKER})"
    try:
        gone = kube.delete_collection("Pod", settings.namespace, selector,
                                      ",".join(f"metadata.name!={name}" for name in kept))
    except errors.Forbidden as e:
        log.warning("job %s: deleting pods one by one (%s; rbac/role.yaml grants pods deletecollection)",
                    settings.job_name, e)
        return kube.delete_all("Pod", settings.namespace, sorted(doomed))
    return sorted(set(gone) & set(doomed))


def _delete_named(kube: KubeApi, settings: JobSettings) -> list[str]:
    """The job's objects known by name (its Secret, its NetworkPolicies), each deleted if
    this manager owns it: an earlier run's of the same name (another manager's UID) is
    left alone."""
    deleted = []
    for kind, name in [("Secret", names.secret_name(settings.job_name)),
                       *(("NetworkPolicy", name) for name in networkpolicy.policy_names(settings))]:
        found = kube.read(kind, settings.namespace, name)
        own = found is not None and (not settings.owner_uid or settings.owner_uid in names.owner_uids(found))
        if own and kube.delete(kind, settings.namespace, name):
            deleted.append(f"{kind.lower()}/{name}")
    return deleted


def delete_because(kube: KubeApi, namespace: str, name: str, cause: str) -> bool:
    """Delete one job pod with the reason on it (read back as its loss's cause); False if it was gone."""
    try:
        kube.patch("Pod", namespace, name, {"metadata": {"annotations": {names.ANNOTATION_DELETED_BECAUSE: cause}}})
    except errors.NotFound:
        return False
    return kube.delete("Pod", namespace, name)


