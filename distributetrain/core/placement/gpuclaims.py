"""Job pods on DRA nodes: their GPUs through a ResourceClaim, not an extended resource.

A node whose GPUs a DRA driver publishes (``dracounting``) has no ``--gpu-resource`` to
request. The job's pod there names a ResourceClaimTemplate instead (``spec.resourceClaims``,
and its container's ``resources.claims``): the resourceclaim controller makes the pod a
claim from it, the scheduler allocates that claim ``share`` devices of ``--device-class``
on the pod's node (the pod is pinned there as every job pod is), and the kubelet has the
driver prepare them (CDI puts them in the container). The claim is the pod's: it is
deleted once the pod has ended. The templates are the job's, one per share size (pods of
equal shares share one), owned by the manager pod and labelled as the job's objects; the
job creates them before its pods and deletes them at teardown.

Pods on device-plugin nodes keep their extended-resource request: one attempt may have both.
"""

from __future__ import annotations

import copy
from collections.abc import Collection

from distributetrain.core.pods import manifests
from distributetrain.core import names
from distributetrain.core.placement.dracounting import API_VERSION
from distributetrain.core.pods.newnodepods import NewNodePlace
from distributetrain.core.placement.placement import Plan
from distributetrain.core.settings import JobSettings
from distributetrain.core.pods.sshkeys import JobKeys

TEMPLATE_KIND = "ResourceClaimTemplate"
CLAIM = "gpus"  # the pod's claim, and the template's one request, by name


def claim_template(settings: JobSettings, share: int) -> dict:
    """``share`` devices of --device-class, for each pod of that share on a DRA node. Its
    claims carry the job's labels (``spec.metadata``, copied to each claim), by which an
    inventory knows them as accounted for by the job's pods (``names.is_job_claim``)."""
    labels = names.job_labels(settings.job_name, names.ROLE_GPUS, settings.owner_uid)
    metadata = {"name": names.claim_template_name(settings.job_name, share, settings.owner_uid),
                "namespace": settings.namespace, "labels": labels}
    if owners := manifests.owner_references(settings):
        metadata["ownerReferences"] = owners
    return {"apiVersion": API_VERSION, "kind": TEMPLATE_KIND, "metadata": metadata,
            "spec": {"metadata": {"labels": dict(labels)},
                     "spec": {"devices": {"requests": [{"name": CLAIM, "exactly": {
                         "deviceClassName": settings.device_class, "count": share}}]}}}}


def claiming_gpus(settings: JobSettings, pod: dict) -> dict:
    """A job pod (``manifests``) given its GPUs through a claim of its template: no extended
    resource, and the label by which an inventory counts its devices before they are allocated."""
    pod = copy.deepcopy(pod)
    share = int(pod["metadata"]["annotations"][names.ANNOTATION_GPUS])
    pod["metadata"]["labels"][names.LABEL_DRA_GPUS] = str(share)
    pod["spec"]["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": names.claim_template_name(
        settings.job_name, share, settings.owner_uid)}]
    for container in pod["spec"]["containers"]:
        container["resources"]["limits"].pop(settings.gpu_resource, None)
        container["resources"]["claims"] = [{"name": CLAIM}]
    return pod


def claims_gpus(pod: dict) -> bool:
    """Whether a job pod gets its GPUs through a claim."""
    return names.LABEL_DRA_GPUS in ((pod.get("metadata") or {}).get("labels") or {})


def templates(settings: JobSettings, shares: Collection[int]) -> list[dict]:
    """One template per share size, smallest first."""
    return [claim_template(settings, share) for share in sorted(set(shares))]


def job_objects(settings: JobSettings, plan: Plan, keys: JobKeys, attempt: int = 0,
                new_node_place: NewNodePlace = NewNodePlace(), dra_nodes: Collection[str] = ()) -> list[dict]:
    """Everything one attempt creates, in creation order: the Secret, the templates of the
    shares on ``dra_nodes``, the workers, the chief (``manifests.job_objects``), those on
    ``dra_nodes`` claiming their GPUs."""
    secret, *pods = manifests.job_objects(settings, plan, keys, attempt, new_node_place)
    on_dra = [node in dra_nodes for node, _ in plan]
    pods = [claiming_gpus(settings, pod) if dra else pod for pod, dra in zip(pods, on_dra)]
    return [secret, *templates(settings, [share for (_, share), dra in zip(plan, on_dra) if dra]), *pods]
