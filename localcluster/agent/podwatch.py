"""One watch on scheduled pods, dispatched to a worker per pod on this agent's nodes.

A single list+watch for all bound pods (field selector `spec.nodeName!=`) is
cheaper than one per node. The watch resumes from the last resourceVersion
after a broken connection (the apiserver is restarted in tests) with
back-off, and relists when that version is too old (410 Gone); a relist
reconciles, so pods deleted while the watch was down are noticed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from localcluster.agent.kubeapi import ApiError, Gone, KubeApi, Unavailable
from localcluster.agent.podworker import PodWorker

log = logging.getLogger(__name__)

PODS_PATH = "/api/v1/pods"
BOUND_PODS_SELECTOR = "spec.nodeName!="
RETRY_DELAY_S = 0.5
RETRY_DELAY_MAX_S = 8.0
WORKER_JOIN_TIMEOUT_S = 30


def _key(pod: dict) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


class PodDispatcher:
    """The pod workers of this agent's nodes, by pod UID."""

    def __init__(self, node_names: set[str], new_worker: Callable[[dict], PodWorker]):
        self._node_names = node_names
        self._new_worker = new_worker
        self._lock = threading.Lock()
        self._workers: dict[str, PodWorker] = {}
        self._last_seen: dict[str, dict] = {}
        self._stopping = False

    def upsert(self, pod: dict) -> None:
        if pod["spec"].get("nodeName") not in self._node_names:
            return
        uid = pod["metadata"]["uid"]
        with self._lock:
            if self._stopping:
                return
            self._last_seen[uid] = pod
            worker = self._workers.get(uid)
            if worker is None:
                worker = self._new_worker(pod)
                self._workers[uid] = worker
                log.info("[%s] bound to %s", _key(pod), pod["spec"]["nodeName"])
                worker.start()
                return
        worker.update(pod)

    def deleted(self, pod: dict) -> None:
        with self._lock:
            worker = self._workers.get(pod["metadata"]["uid"])
        if worker is not None:
            worker.deleted(pod)

    def resync(self, pods: list[dict]) -> None:
        """A fresh list: start what is new, and tell workers of pods no longer listed."""
        listed = {pod["metadata"]["uid"] for pod in pods}
        with self._lock:
            vanished = [(uid, self._last_seen.get(uid)) for uid in self._workers if uid not in listed]
        for uid, pod in vanished:
            if pod is not None:
                self.deleted(pod)
        for pod in pods:
            self.upsert(pod)

    def done(self, uid: str) -> None:
        with self._lock:
            self._workers.pop(uid, None)
            self._last_seen.pop(uid, None)

    def find(self, namespace: str, name: str) -> PodWorker | None:
        """The newest worker of a pod by name (an older one may still be terminating)."""
        with self._lock:
            matches = [w for w in self._workers.values() if w.namespace == namespace and w.pod_name == name]
        return matches[-1] if matches else None

    def shutdown(self) -> None:
        """Stop every pod (SIGTERM, short grace, SIGKILL) and wait for the workers to clean up."""
        with self._lock:
            self._stopping = True
            workers = list(self._workers.values())
        for worker in workers:
            worker.shutdown()
        for worker in workers:
            worker.join(WORKER_JOIN_TIMEOUT_S)
            if worker.is_alive():
                log.error("[%s] worker did not finish within %ss", worker.key, WORKER_JOIN_TIMEOUT_S)


class PodWatcher(threading.Thread):
    """Feeds the dispatcher from list+watch, until the process ends."""

    def __init__(self, api: KubeApi, dispatcher: PodDispatcher):
        super().__init__(name="pod-watch", daemon=True)
        self._api = api
        self._dispatcher = dispatcher

    def run(self) -> None:
        resource_version = None
        delay = RETRY_DELAY_S
        outage = False
        while True:
            try:
                if resource_version is None:
                    listing = self._api.get(PODS_PATH, fieldSelector=BOUND_PODS_SELECTOR)
                    self._dispatcher.resync(listing["items"])
                    resource_version = listing["metadata"]["resourceVersion"]
                for event in self._api.watch(
                    PODS_PATH, fieldSelector=BOUND_PODS_SELECTOR, resourceVersion=resource_version,
                    allowWatchBookmarks="true",
                ):
                    resource_version = self._handle(event, resource_version)
                    if outage:
                        log.info("pod watch re-established")
                        outage = False
                    delay = RETRY_DELAY_S
            except Gone:
                log.info("pod watch: resourceVersion %s too old, relisting", resource_version)
                resource_version = None
            except (Unavailable, ApiError) as error:
                if not outage:
                    log.warning("pod watch interrupted, retrying: %s", error)
                    outage = True
                time.sleep(delay)
                delay = min(delay * 2, RETRY_DELAY_MAX_S)

    def _handle(self, event: dict, resource_version: str) -> str:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(410, obj.get("reason", "Expired"), obj.get("message", ""))
            raise ApiError(obj.get("code", 500), obj.get("reason", ""), obj.get("message", ""))
        new_version = obj.get("metadata", {}).get("resourceVersion") or resource_version
        if kind == "DELETED":
            self._dispatcher.deleted(obj)
        elif kind in ("ADDED", "MODIFIED"):
            self._dispatcher.upsert(obj)
        return new_version
