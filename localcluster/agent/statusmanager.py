"""Writes pod statuses to the apiserver, few and in order, like the kubelet's status manager.

Pod workers publish the latest status they computed; this thread writes only
the newest one per pod and skips writes that would change nothing, so a burst
of changes (sandbox ready, container started, probe passed) costs one request
when the apiserver is busy. After a pod's last status is written, its final
delete (grace period 0, UID precondition) is issued here too, so the API
never sees the pod gone before its terminal status.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from localcluster.agent.kubeapi import (
    STRATEGIC_MERGE_PATCH, ApiError, Conflict, KubeApi, NotFound, Unavailable, pod_path,
)

log = logging.getLogger(__name__)

RETRY_DELAY_S = 1.0
RETRY_DELAY_MAX_S = 10.0


@dataclass
class _Entry:
    namespace: str
    name: str
    status: dict | None = None
    finalize: bool = False


class StatusManager(threading.Thread):
    """The single writer of pod statuses and final deletes."""

    def __init__(self, api: KubeApi):
        super().__init__(name="status-manager", daemon=True)
        self._api = api
        self._cond = threading.Condition()
        self._dirty: OrderedDict[str, _Entry] = OrderedDict()
        self._sent: dict[str, dict] = {}
        self._stopping = False
        self.writes = 0

    def publish(self, uid: str, namespace: str, name: str, status: dict) -> None:
        with self._cond:
            if self._sent.get(uid) == status and uid not in self._dirty:
                return
            entry = self._dirty.setdefault(uid, _Entry(namespace, name))
            entry.status = status
            self._cond.notify()

    def finalize(self, uid: str, namespace: str, name: str) -> None:
        """Delete the pod for good once its pending status is written."""
        with self._cond:
            self._dirty.setdefault(uid, _Entry(namespace, name)).finalize = True
            self._cond.notify()

    def forget(self, uid: str) -> None:
        """The pod is gone from the API: drop what was still to be written."""
        with self._cond:
            self._dirty.pop(uid, None)
            self._sent.pop(uid, None)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def run(self) -> None:
        delay = RETRY_DELAY_S
        while True:
            with self._cond:
                while not self._dirty and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                uid, entry = self._dirty.popitem(last=False)
            try:
                self._write(uid, entry)
                delay = RETRY_DELAY_S
            except Unavailable as error:
                log.warning("[%s/%s] status write failed, retrying in %.0fs: %s", entry.namespace, entry.name, delay, error)
                self._requeue(uid, entry)
                time.sleep(delay)
                delay = min(delay * 2, RETRY_DELAY_MAX_S)
            except ApiError as error:
                log.error("[%s/%s] status write rejected: %s", entry.namespace, entry.name, error)

    def _requeue(self, uid: str, entry: _Entry) -> None:
        with self._cond:
            newer = self._dirty.pop(uid, None)
            if newer is not None:
                entry.status = newer.status or entry.status
                entry.finalize = entry.finalize or newer.finalize
            self._dirty[uid] = entry

    def _write(self, uid: str, entry: _Entry) -> None:
        if entry.status is not None and self._sent.get(uid) != entry.status:
            body = {"metadata": {"uid": uid}, "status": entry.status}
            try:
                self._api.patch(pod_path(entry.namespace, entry.name, "status"), body, STRATEGIC_MERGE_PATCH)
                self.writes += 1
                with self._cond:
                    self._sent[uid] = entry.status
                log.debug("[%s/%s] status: %s", entry.namespace, entry.name, entry.status.get("phase"))
            except (NotFound, Conflict):
                # Deleted, or replaced by a pod with the same name: nothing left to report.
                return
        if entry.finalize:
            options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                       "preconditions": {"uid": uid}}
            try:
                self._api.delete(pod_path(entry.namespace, entry.name), options)
                log.info("[%s/%s] deleted (final delete after termination)", entry.namespace, entry.name)
            except (NotFound, Conflict):
                pass
