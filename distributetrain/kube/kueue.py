"""Kueue's objects as the manager reads them, in the API version the cluster's Kueue serves.

Kueue v0.15 and later serve ``kueue.x-k8s.io/v1beta2`` (v0.15 to v0.19 ``v1beta1`` beside
it); v0.14 and earlier ``v1beta1`` only. The fields the manager reads have the same names
in both (a LocalQueue's ``spec.clusterQueue``, a ClusterQueue's ``resourceGroups``, a
ResourceFlavor's ``nodeLabels`` and ``tolerations``), but a ClusterQueue's cohort, which
``podgroup.gpu_quota`` reads under either name. Which version is decided once per
manager: the newest whose discovery document (``/apis/kueue.x-k8s.io/VERSION``, readable
by every authenticated account: no rule in rbac/) lists LocalQueues. Kueue's visibility
API, which came with the same versions (v1beta2 from v0.15, v1beta1 from v0.9), is read
in the matching one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from kubernetes import client

from distributetrain.core import errors
from distributetrain.kube.calls import read_json

T = TypeVar("T")

GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")  # newest first
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"  # Kueue's aggregated API: pending workloads
REQUEST_OPTIONS = {"_preload_content": False}
# (operation, what, deadline_s=...) -> its result: the client's one retried call
Call = Callable[..., T]


class KueueReads:
    """The manager's reads of Kueue: LocalQueues, ClusterQueues, ResourceFlavors and the
    visibility API's pending workloads, each in the version the cluster serves."""

    def __init__(self, api_client: client.ApiClient, call: Call):
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self._call = call
        self._version: str | None = None  # "" once discovery found no version serving LocalQueues
        self._lock = threading.Lock()

    def version(self) -> str | None:
        """``kueue.x-k8s.io``'s version the manager reads; None where Kueue serves no LocalQueues."""
        with self._lock:
            if self._version is None:
                self._version = next((v for v in VERSIONS if self._serves_local_queues(v)), "")
            return self._version or None

    def _serves_local_queues(self, version: str) -> bool:
        path = f"/apis/{GROUP}/{version}"
        try:
            document = self._call(lambda: self._get(path), f"discover {GROUP}/{version}")
        except errors.NotFound:
            return False
        return any(resource.get("name") == "localqueues" for resource in document.get("resources") or ())

    def read(self, plural: str, namespace: str | None, name: str) -> dict | None:
        """A Kueue object (a LocalQueue; a ClusterQueue or ResourceFlavor when ``namespace``
        is None); None if it is absent, or Kueue is not installed."""
        version = self.version()
        if version is None:
            return None
        if namespace is None:
            def read() -> dict:
                return read_json(self.custom.get_cluster_custom_object(GROUP, version, plural, name,
                                                                       **REQUEST_OPTIONS))
        else:
            def read() -> dict:
                return read_json(self.custom.get_namespaced_custom_object(GROUP, version, namespace, plural, name,
                                                                          **REQUEST_OPTIONS))
        try:
            return self._call(read, f"read {plural}.{GROUP}/{version} [{namespace or ''}/{name}]")
        except errors.NotFound:
            return None

    def pending_workloads(self, namespace: str, local_queue: str) -> list[dict]:
        """The workloads waiting in a LocalQueue, in queue order, from Kueue's visibility API
        (an aggregated API a cluster may not serve: NotFound then). One attempt, no
        retries: the answer is news, and the next one comes soon."""
        version = self.version()
        if version is None:
            raise errors.NotFound(f"no {GROUP} API: Kueue is not installed")
        path = (f"/apis/{VISIBILITY_GROUP}/{version}/namespaces/{namespace}/localqueues/{local_queue}/"
                "pendingworkloads")
        return self._call(lambda: self._get(path), f"read pending workloads of [{namespace}/{local_queue}]",
                          deadline_s=0).get("items") or []

    def _get(self, path: str) -> dict:
        return read_json(self.api_client.call_api(path, "GET", header_params={"Accept": "application/json"},
                                                  auth_settings=["BearerToken"], _return_http_data_only=True,
                                                  **REQUEST_OPTIONS))
