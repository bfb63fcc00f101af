"""Which version of Kueue's API the cluster serves, and a LocalQueue's pending workloads.

Kueue v0.15 and later serve ``kueue.x-k8s.io/v1beta2`` (v0.15 to v0.19 ``v1beta1`` beside
it); v0.14 and earlier ``v1beta1`` only. The fields the manager reads have the same names
in both (a LocalQueue's ``spec.clusterQueue``, a ClusterQueue's ``resourceGroups``, a
ResourceFlavor's ``nodeLabels`` and ``tolerations``), but a ClusterQueue's cohort, which
``podgroup.gpu_quota`` reads under either name. Which version is decided once per
manager: the newest whose discovery document (``/apis/kueue.x-k8s.io/VERSION``, readable
by every authenticated account: no rule in rbac/) lists LocalQueues; ``Kube`` reads
Kueue's kinds (``kube.resources``) in it. Kueue's visibility API, which came with the
same versions (v1beta2 from v0.15, v1beta1 from v0.9), is read in the matching one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from kubernetes import client

from distributetrain.core import errors
from distributetrain.kube.calls import read_json, send
from distributetrain.kube.resources import KUEUE_GROUP

T = TypeVar("T")

VERSIONS = ("v1beta2", "v1beta1")  # newest first
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"  # Kueue's aggregated API: pending workloads
# (operation, what, deadline_s=...) -> its result: the client's one retried call
Call = Callable[..., T]


class KueueReads:
    """The version of Kueue's API the cluster serves, and the visibility API's pending workloads."""

    def __init__(self, api_client: client.ApiClient, call: Call):
        self.api_client = api_client
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
        path = f"/apis/{KUEUE_GROUP}/{version}"
        try:
            document = self._call(lambda: read_json(send(self.api_client, "GET", path)),
                                  f"discover {KUEUE_GROUP}/{version}")
        except errors.NotFound:
            return False
        return any(resource.get("name") == "localqueues" for resource in document.get("resources") or ())

    def pending_workloads(self, namespace: str, local_queue: str) -> list[dict]:
        """The workloads waiting in a LocalQueue, in queue order, from Kueue's visibility API
        (an aggregated API a cluster may not serve: NotFound then). One attempt, no
        retries: the answer is news, and the next one comes soon."""
        version = self.version()
        if version is None:
            raise errors.NotFound(f"no {KUEUE_GROUP} API: Kueue is not installed")
        path = (f"/apis/{VISIBILITY_GROUP}/{version}/namespaces/{namespace}/localqueues/{local_queue}/"
                "pendingworkloads")
        return self._call(lambda: read_json(send(self.api_client, "GET", path)),
                          f"read pending workloads of [{namespace}/{local_queue}]", deadline_s=0).get("items") or []
