"""The API calls of DRA GPUs (``resource.k8s.io/v1``, served from Kubernetes 1.34 on).

What the manager reads (``core.placement.dracounting`` makes GPUs of it): the job's DeviceClass
(get, by its name), every ResourceSlice and every namespace's ResourceClaims (list, and
watch while it waits for GPUs); what it writes: its ResourceClaimTemplates in the job's
namespace (created through ``Kube.create_owned``, deleted at teardown by their labels).

A cluster that serves no ``resource.k8s.io/v1`` (before 1.34, or with the API turned off)
answers 404: it has no DRA GPUs, which is no error. A refusal (403) is raised, as any:
without the rules of ``rbac/`` the inventory would miss GPUs.

These kinds go through ``Kube``'s verbs like any other (``kube.resources``).
"""

from __future__ import annotations

from collections.abc import Iterator

from distributetrain.core import errors
from distributetrain.kube.api import KubeApi

SLICES, CLAIMS = "ResourceSlice", "ResourceClaim"  # read across the cluster


def create_templates(kube: KubeApi, objects: list[dict]) -> None:
    """The ResourceClaimTemplates among ``objects``, before the pods they serve: a pod's claim
    is made from its template as soon as the pod exists (a template late makes it wait)."""
    templates = [obj for obj in objects if obj["kind"] == "ResourceClaimTemplate"]
    if templates:
        kube.create_all_owned(templates)


def device_class(kube: KubeApi, name: str) -> dict | None:
    """The DeviceClass; None if it does not exist (or the cluster serves no DRA)."""
    return kube.read("DeviceClass", None, name)


def pages(kube: KubeApi, kind: str) -> Iterator[list[dict]]:
    """Every ResourceSlice, or every namespace's ResourceClaim (``SLICES``, ``CLAIMS``), page
    by page; none where the cluster serves no ``resource.k8s.io/v1``."""
    try:
        for page, _ in kube.list_pages(kind):
            yield page
    except errors.NotFound:
        return


def listed(kube: KubeApi, kind: str) -> list[dict]:
    return [item for page in pages(kube, kind) for item in page]
