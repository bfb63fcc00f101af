"""The API calls of DRA GPUs (``resource.k8s.io/v1``, served from Kubernetes 1.34 on).

What the manager reads (``core.placement.dracounting`` makes GPUs of it): the job's DeviceClass
(get, by its name), every ResourceSlice and every namespace's ResourceClaims (list, and
watch while it waits for GPUs); what it writes: its ResourceClaimTemplates in the job's
namespace (created through ``Kube.create_owned``, deleted at teardown by their labels).

A cluster that serves no ``resource.k8s.io/v1`` (before 1.34, or with the API turned off)
answers 404: it has no DRA GPUs, which is no error. A refusal (403) is raised, as any:
without the rules of ``rbac/`` the inventory would miss GPUs.

``DraCalls`` is part of ``kube.client.Kube``: the list and watch of these kinds ride on
its generic ones (``LISTS`` names their calls), with the same retries and timeouts.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator

from kubernetes import client

from distributetrain.core import errors
from distributetrain.kube.api import KubeApi
from distributetrain.kube.calls import read_json

log = logging.getLogger(__name__)

GROUP, VERSION = "resource.k8s.io", "v1"
SLICES, CLAIMS = "resourceslices", "resourceclaims"
# The list (and, with watch=True, watch) call of each kind read across the cluster.
LISTS = {SLICES: "list_resource_slice", CLAIMS: "list_resource_claim_for_all_namespaces"}


class DraCalls:
    """The calls of ``Kube`` for DRA kinds (see ``LISTS`` for its lists and watches)."""

    @functools.cached_property
    def resource(self) -> client.ResourceV1Api:
        return client.ResourceV1Api(self.api_client)

    @property
    def dra_kinds(self) -> dict[str, tuple[object, str]]:
        """The namespaced kinds the job creates, for ``Kube._typed``."""
        return {"ResourceClaimTemplate": (self.resource, "resource_claim_template")}

    def watch_cluster(self, kind: str, resource_version: str, timeout_s: float) -> Iterator[tuple[str, dict]]:
        """Every ResourceSlice's, or every namespace's ResourceClaims', changes (``SLICES``, ``CLAIMS``)."""
        return self._watch(kind, None, resource_version, timeout_s, {})

    def delete_claim_templates(self, namespace: str, label_selector: str) -> list[str]:
        """Delete the selected ResourceClaimTemplates in one request; the names deleted, sorted."""
        body = client.V1DeleteOptions(propagation_policy="Background")
        answer = self._call(lambda: read_json(self.resource.delete_collection_namespaced_resource_claim_template(
            namespace, body=body, label_selector=label_selector, _preload_content=False)),
            f"delete ResourceClaimTemplates [{namespace}] {label_selector}")
        deleted = sorted(item["metadata"]["name"] for item in answer.get("items") or ())
        if deleted:
            log.info("deleted ResourceClaimTemplates [%s] %s: %s", namespace, label_selector, ", ".join(deleted))
        return deleted


def create_templates(kube: KubeApi, objects: list[dict]) -> None:
    """The ResourceClaimTemplates among ``objects``, before the pods they serve: a pod's claim
    is made from its template as soon as the pod exists (a template late makes it wait)."""
    templates = [obj for obj in objects if obj["kind"] == "ResourceClaimTemplate"]
    if templates:
        kube.create_all_owned(templates)


def device_class(kube: KubeApi, name: str) -> dict | None:
    """The DeviceClass; None if it does not exist (or the cluster serves no DRA)."""
    return kube.read_custom(GROUP, VERSION, "deviceclasses", None, name)


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
