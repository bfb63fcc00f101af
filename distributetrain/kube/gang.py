"""Whether the cluster serves gang scheduling's PodGroups.

``scheduling.k8s.io/v1beta1`` PodGroups are served from Kubernetes 1.37 where the API server
runs with the GenericWorkload gate and that version asked for (``core.pods.gang``). Which is
decided once per manager process, from discovery documents every authenticated account may
read (no rule in rbac/): the group's, which lists the versions served (one request, answered
on every release: nothing fails where there is no PodGroup), then, where it lists v1beta1,
that version's, which lists its resources. The job's PodGroups are created and deleted
through ``Kube``'s verbs like any kind (``kube.resources``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from kubernetes import client

from distributetrain.core import errors
from distributetrain.kube.calls import read_json, send
from distributetrain.kube.resources import RESOURCES

log = logging.getLogger(__name__)

T = TypeVar("T")

POD_GROUPS = RESOURCES["PodGroup"]
GROUP, VERSION, PLURAL = POD_GROUPS.group, POD_GROUPS.version, POD_GROUPS.plural
# (operation, what, deadline_s=...) -> its result: the client's one retried call
Call = Callable[..., T]


class PodGroups:
    """Whether the cluster serves PodGroups: decided once, refused at most once."""

    def __init__(self, api_client: client.ApiClient, call: Call):
        self.api_client = api_client
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

    def _get(self, path: str) -> dict:
        return read_json(send(self.api_client, "GET", path))
