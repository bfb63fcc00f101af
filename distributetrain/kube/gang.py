"""The API calls of gang scheduling: whether the cluster serves PodGroups, and the job's own.

``scheduling.k8s.io/v1beta1`` PodGroups are served from Kubernetes 1.37 where the API server
runs with the GenericWorkload gate and that version asked for (``core.pods.gang``). Which is
decided once per manager process, from discovery documents every authenticated account may
read (no rule in rbac/): the group's, which lists the versions served (one request, answered
on every release: nothing fails where there is no PodGroup), then, where it lists v1beta1,
that version's, which lists its resources. The client has no typed calls for the kind: the
job's PodGroups go through the custom objects' calls (``Kube._typed`` names them), deleted
at teardown in one request by the job's labels.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from kubernetes import client

from distributetrain.core import errors
from distributetrain.kube.calls import read_json

log = logging.getLogger(__name__)

T = TypeVar("T")

GROUP, VERSION, PLURAL = "scheduling.k8s.io", "v1beta1", "podgroups"
REQUEST_OPTIONS = {"_preload_content": False}
# (operation, what, deadline_s=...) -> its result: the client's one retried call
Call = Callable[..., T]


class PodGroupApi:
    """PodGroups through the custom objects' calls, in the typed client's names (``Kube._typed``)."""

    def __init__(self, custom: client.CustomObjectsApi):
        self.custom = custom

    def create_namespaced_pod_group(self, namespace: str, body: dict, **options) -> object:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, **options)

    def read_namespaced_pod_group(self, name: str, namespace: str, **options) -> object:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, **options)


class PodGroups:
    """Whether the cluster serves PodGroups (decided once), and the job's deleted."""

    def __init__(self, api_client: client.ApiClient, call: Call):
        self.api_client = api_client
        self.api = PodGroupApi(client.CustomObjectsApi(api_client))
        self._call = call
        self._served: bool | None = None
        self._lock = threading.Lock()

    def served(self) -> bool:
        with self._lock:
            if self._served is None:
                self._served = self._discover()
                log.info("gang scheduling: the cluster %s %s/%s PodGroups", "serves" if self._served else
                         "serves no", GROUP, VERSION)
            return self._served

    def refused(self, why: str) -> None:
        """Served, but this manager may not create them (an older rbac/): the job goes without."""
        with self._lock:
            self._served = False
        log.warning("gang scheduling: the job's pods are no gang (%s; rbac/role.yaml grants podgroups)", why)

    def _discover(self) -> bool:
        group = self._call(lambda: self._get(f"/apis/{GROUP}"), f"discover {GROUP}")
        if f"{GROUP}/{VERSION}" not in {v.get("groupVersion") for v in group.get("versions") or ()}:
            return False
        try:
            document = self._call(lambda: self._get(f"/apis/{GROUP}/{VERSION}"), f"discover {GROUP}/{VERSION}")
        except errors.NotFound:  # the version went between the two reads (an apiserver restarted)
            return False
        return any(resource.get("name") == PLURAL for resource in document.get("resources") or ())

    def delete(self, namespace: str, label_selector: str) -> list[str]:
        """Delete the selected PodGroups in one request; the names deleted, sorted. Each goes
        once no pod of it runs any more (the API server's PodGroupProtection finalizer)."""
        body = client.V1DeleteOptions(propagation_policy="Background")
        answer = self._call(lambda: read_json(self.api.custom.delete_collection_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body=body, label_selector=label_selector, **REQUEST_OPTIONS)),
            f"delete PodGroups [{namespace}] {label_selector}")
        deleted = sorted(item["metadata"]["name"] for item in answer.get("items") or ())
        if deleted:
            log.info("deleted PodGroups [%s] %s: %s", namespace, label_selector, ", ".join(deleted))
        return deleted

    def _get(self, path: str) -> dict:
        return read_json(self.api_client.call_api(path, "GET", header_params={"Accept": "application/json"},
                                                  auth_settings=["BearerToken"], _return_http_data_only=True,
                                                  **REQUEST_OPTIONS))
