"""The thin, idempotent layer between the manager and the Kubernetes API.

- The API's verbs over a table of kinds (``kube.resources``): every kind is the same
  request to its URL path (``calls.send``), none has a method of its own.
- Objects travel as plain JSON dicts: the builders make dicts, and listing 150,000 pods
  as dicts is far cheaper than as client models.
- Every call goes through ``calls.call``: errors translated once, transient failures
  retried until the retry deadline, every request with its timeouts (``connection``). So
  is "forbidden" for a while after such a failure: a restarted apiserver serves requests
  before its RBAC caches are synced and denies them meanwhile (kubernetes/kubernetes#121635).
- Creating an object that already exists is fine if the job owns it (a restarted
  manager adopts its job); deleting one that is gone is fine too.
- A watch is a chain of short watch requests, each resumed from the last
  resourceVersion. The server ends each one after ``watch_chunk_s``, so a read timeout a
  little longer than that means the connection went silent: a stalled connection hides
  an event for seconds, not until the server's watch timeout. Only ``informer`` calls it.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import urllib3
from kubernetes import client

from distributetrain.core import errors, names
from distributetrain.core.clock import Clock
from distributetrain.kube.api import KubeApi
from distributetrain.kube.calls import call, drain, is_transient, read_json, send
from distributetrain.kube.connection import API_CONCURRENCY, ApiTimeouts
from distributetrain.kube.gang import PodGroups
from distributetrain.kube.kueue import KueueReads
from distributetrain.kube.podlist import PodLister
from distributetrain.kube.resources import RESOURCES

log = logging.getLogger(__name__)

LIST_PAGE_SIZE = 500
WATCH_RECONNECT_DELAY_S = 0.2  # after a broken watch stream: never a busy loop
# The API's names of the selectors the verbs take as keyword arguments.
QUERY_NAMES = {"field_selector": "fieldSelector", "label_selector": "labelSelector",
               "resource_version": "resourceVersion", "resource_version_match": "resourceVersionMatch"}
DELETE_IN_BACKGROUND = {"propagationPolicy": "Background"}  # a DeleteOptions body
AUTHZ_SETTLE_S = 30.0  # after the API was unreachable, "forbidden" is retried this long

T = TypeVar("T")
A = TypeVar("A")


def _query(selectors: Mapping[str, str]) -> list[tuple[str, str]]:
    """Selectors as the API's query parameters (the empty ones left out)."""
    return [(QUERY_NAMES[key], value) for key, value in selectors.items() if value]


def _where(namespace: str | None, selectors: Mapping[str, str]) -> str:
    """How log lines name a set of pods: ``[namespace] selector``."""
    terms = " ".join(f"{value}" for value in selectors.values() if value)
    return f"[{namespace or 'all namespaces'}]" + (f" {terms}" if terms else "")


class Kube(KubeApi):
    """The calls the manager makes, each one line of intent."""

    def __init__(self, api_client: client.ApiClient, clock: Clock, timeouts: ApiTimeouts | None = None):
        self.api_client = api_client
        self.timeouts = timeouts or ApiTimeouts.from_environment()
        self.clock = clock  # of the retries' deadlines and delays, and of a watch's span
        self.kueue = KueueReads(api_client, self._call)
        self.pod_groups = PodGroups(api_client, self._call)
        self.pod_lister = PodLister(api_client, self._call, self._retryable)
        self.requests = 0  # API requests made, for the benchmarks
        self._requests_lock = threading.Lock()
        self._unreachable_at = float("-inf")  # when (of the clock) the API last failed transiently

    def _call(self, operation: Callable[[], T], what: str = "API call", deadline_s: float | None = None,
              retryable: Callable[[errors.DistributeTrainError], bool] | None = None) -> T:
        """``operation`` retried as ``calls.call`` retries, until the client's retry deadline
        (or ``deadline_s``) while ``retryable`` (or the client's rule) says so."""
        with self._requests_lock:
            self.requests += 1
        deadline_s = self.timeouts.retry_deadline_s if deadline_s is None else deadline_s
        return call(operation, self.clock, deadline_s, retryable or self._retryable, what)

    @staticmethod
    def _concurrently(operation: Callable[[A], T], items: Iterable[A]) -> list[T]:
        """``operation`` on every item, API_CONCURRENCY at a time, results in order. On the
        first error the items not yet started are dropped, and it is raised once the
        started calls have returned (none is left running behind the caller)."""
        items = list(items)
        if len(items) <= 1:
            return [operation(item) for item in items]
        with ThreadPoolExecutor(min(API_CONCURRENCY, len(items))) as pool:
            return list(pool.map(operation, items))

    def _retryable(self, error: errors.DistributeTrainError) -> bool:
        if is_transient(error):
            self._unreachable_at = self.clock.monotonic()
            return True
        # A denial right after an outage is the restarted apiserver's unsynced RBAC cache;
        # one that persists past the settle time is real (exit code 77).
        return isinstance(error, errors.Forbidden) and self.clock.monotonic() - self._unreachable_at < AUTHZ_SETTLE_S

    # -- the request every verb makes ---------------------------------------------------
    def _path(self, kind: str, namespace: str | None, name: str | None = None) -> str:
        """The URL path of the kind's collection (every namespace's where ``namespace`` is
        None) or of one object, in the version the cluster serves (``kube.resources``)."""
        resource = RESOURCES[kind]
        version = resource.version or self.kueue.version()
        if not version:
            raise errors.NotFound(f"the cluster serves no {resource.group} API")
        root = f"/apis/{resource.group}/{version}" if resource.group else f"/api/{version}"
        where = f"/namespaces/{namespace}" if resource.namespaced and namespace else ""
        return f"{root}{where}/{resource.plural}" + (f"/{name}" if name else "")

    def _send(self, method: str, kind: str, namespace: str | None, name: str | None, what: str, *,
              query: Iterable[tuple[str, str]] = (), body: object = None, content_type: str | None = None,
              timeout: tuple[float, float] | None = None, answer: Callable = read_json):
        """One request of a verb to the kind's path, retried as ``_call`` retries; ``answer``
        makes the result of the response (its JSON by default)."""
        path = self._path(kind, namespace, name)
        return self._call(lambda: answer(send(self.api_client, method, path, query, body, content_type=content_type,
                                              timeout=timeout)), what)

    # -- reads -------------------------------------------------------------------------
    def read(self, kind: str, namespace: str | None, name: str) -> dict | None:
        """The object; None if it is absent, or the cluster serves no such kind (``namespace``
        None for a cluster-scoped kind)."""
        try:
            return self._send("GET", kind, namespace, name, f"read {kind} [{namespace or ''}/{name}]")
        except errors.NotFound:
            return None

    def list_pages(
        self, kind: str, namespace: str | None = None, **selectors: str
    ) -> Iterator[tuple[list[dict], str]]:
        """Yield (items, resourceVersion) page by page; ``namespace`` None: every namespace's."""
        token = None
        what = f"list {RESOURCES[kind].plural} {_where(namespace, selectors)}"
        query = [("limit", str(LIST_PAGE_SIZE)), *_query(selectors)]
        while True:
            page = self._send("GET", kind, namespace, None, what, query=[*query, *((("continue", token),) if token else ())])
            yield page.get("items") or [], page["metadata"].get("resourceVersion", "")
            token = page["metadata"].get("continue")
            if not token:
                return

    def list_all(self, kind: str, namespace: str | None = None, **selectors: str) -> tuple[list[dict], str]:
        items, version = [], ""
        for page, version in self.list_pages(kind, namespace, **selectors):
            items.extend(page)
        return items, version

    def each_pod_request(self, visit: Callable[[dict], None], restart: Callable[[], None], **selectors: str) -> str:
        """Every pod of the cluster, cut to what an inventory reads (``podwire``), to
        ``visit``; returns the list's resourceVersion. One request from the API server's
        watch cache, or pages where it reads the list from etcd (``podlist``); ``restart``
        forgets the pods visited before a list starts over."""
        return self.pod_lister.each_pod(visit, restart, _query(selectors), f"list pods {_where(None, selectors)}")

    def kueue_version(self) -> str | None:
        """The version of Kueue's API the manager reads, decided once (``kube.kueue``)."""
        return self.kueue.version()

    def pending_workloads(self, namespace: str, local_queue: str) -> list[dict]:
        """A LocalQueue's pending workloads from Kueue's visibility API, tried once."""
        return self.kueue.pending_workloads(namespace, local_queue)

    def serves_pod_groups(self) -> bool:
        """Whether the job's pods may be a gang (``kube.gang``): decided once, refused at most once."""
        return self.pod_groups.served()

    def refuse_pod_groups(self, why: str) -> None:
        self.pod_groups.refused(why)

    # -- writes ------------------------------------------------------------------------
    def create(self, obj: dict, dry_run: bool = False) -> dict:
        """Create; ``AlreadyExists`` if the name is taken (whoever's it is). ``dry_run``: as
        admission would (mutated, validated), nothing stored."""
        kind, namespace, name = obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]
        return self._send("POST", kind, namespace, None,
                          f"create {kind} [{namespace or ''}/{name}]" + (" (dry run)" if dry_run else ""),
                          query=[("dryRun", "All")] if dry_run else [], body=obj)

    def create_owned(self, obj: dict, dry_run: bool = False) -> dict:
        """Create, or adopt the existing object if it has the same owner as ``obj``."""
        kind, namespace, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            created = self.create(obj, dry_run)
        except errors.AlreadyExists:
            if dry_run:
                return obj
            existing = self.read(kind, namespace, name)
            if existing is None or not (names.owner_uids(obj) & names.owner_uids(existing)):
                raise errors.NotOwned(
                    f"{kind} {namespace}/{name} already exists and does not belong to this job"
                ) from None
            log.info("adopted %s [%s/%s]", kind, namespace, name)
            return existing
        if not dry_run:
            log.info("created %s [%s/%s]", kind, namespace, name)
        return created

    def create_all_owned(self, objs: list[dict]) -> list[dict]:
        return self._concurrently(self.create_owned, objs)

    def update(self, obj: dict) -> dict:
        """Update the whole object as read (its resourceVersion: ``Conflict`` if it changed since)."""
        kind, namespace, name = obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]
        return self._send("PUT", kind, namespace, name, f"update {kind} [{namespace or ''}/{name}]", body=obj)

    def patch(self, kind: str, namespace: str, name: str, patch: dict | list[dict]) -> dict:
        """A strategic merge patch (a dict: null removes a key) or a JSON patch (a list of
        operations, whose ``test`` makes it conditional); the object as patched."""
        content_type = "application/json-patch+json" if isinstance(patch, list) else \
            "application/strategic-merge-patch+json"
        return self._send("PATCH", kind, namespace, name, f"patch {kind} [{namespace}/{name}]", body=patch,
                          content_type=content_type)

    def delete(self, kind: str, namespace: str, name: str, grace_period_s: int | None = None) -> bool:
        """Delete in the background; True if it was there. 'Not found' is a state, not an error."""
        body = {**DELETE_IN_BACKGROUND, **({"gracePeriodSeconds": grace_period_s} if grace_period_s is not None else {})}
        try:
            self._send("DELETE", kind, namespace, name, f"delete {kind} [{namespace}/{name}]", body=body, answer=drain)
        except errors.NotFound:
            return False
        log.info("deleted %s [%s/%s]", kind, namespace, name)
        return True

    def delete_all(self, kind: str, namespace: str, names: list[str]) -> list[str]:
        """Delete each (in the background); return the names that were there."""
        found = self._concurrently(lambda name: self.delete(kind, namespace, name), names)
        return [name for name, was_there in zip(names, found) if was_there]

    def delete_collection(self, kind: str, namespace: str, label_selector: str, field_selector: str = "") -> list[str]:
        """Delete every selected object in one request (in the background, each with its own
        grace period); the names the server deleted, sorted."""
        where = f"[{namespace}] {label_selector} {field_selector}".rstrip()
        query = _query({"label_selector": label_selector, "field_selector": field_selector})
        answer = self._send("DELETE", kind, namespace, None, f"delete {kind} {where}", query=query,
                            body=DELETE_IN_BACKGROUND)
        deleted = sorted(item["metadata"]["name"] for item in answer.get("items") or ())
        log.info("deleted %s %s: %s", RESOURCES[kind].plural, where, ", ".join(deleted) or "none")
        return deleted

    # -- watches -----------------------------------------------------------------------
    def watch(self, kind: str, namespace: str | None, resource_version: str, timeout_s: float,
              **selectors: str) -> Iterator[tuple[str, dict]]:
        """Watch events (type, object), bookmarks included, from ``resource_version`` for
        ``timeout_s``; ``namespace`` None: every namespace's (or a cluster-scoped kind).

        One watch request per ``watch_chunk_s``, each resumed from the last resourceVersion
        seen; so is a request whose stream broke or went silent (one INFO line says so).
        Raises ``errors.Gone`` when the version is too old, and ``errors.TransientApiError``
        when the server ends the watch with another error or stays unreachable past the
        retry deadline: the caller lists again either way.
        """
        give_up_at = self.clock.monotonic() + timeout_s
        version = resource_version
        plural = RESOURCES[kind].plural
        where = "" if kind == "Node" else _where(namespace, selectors)  # nodes have no namespace
        while (remaining := give_up_at - self.clock.monotonic()) > 0:
            log.debug("watching %s %s from resourceVersion %s", plural, where, version)
            try:
                for event_type, obj in self._watch_request(kind, namespace, version, remaining, selectors):
                    version = obj["metadata"].get("resourceVersion") or version
                    yield event_type, obj
            except (urllib3.exceptions.HTTPError, OSError) as e:
                self._unreachable_at = self.clock.monotonic()
                log.info("watch of %s %s broke (%s); reconnecting from resourceVersion %s", plural, where, e, version)
                self.clock.sleep(min(WATCH_RECONNECT_DELAY_S, give_up_at - self.clock.monotonic()))

    def _watch_request(
        self, kind: str, namespace: str | None, version: str, remaining_s: float, selectors: Mapping[str, str]
    ) -> Iterator[tuple[str, dict]]:
        """One watch request: its events until the server ends it (or the stream breaks)."""
        chunk_s = max(1, math.ceil(min(remaining_s, self.timeouts.watch_chunk_s)))
        query = [("watch", "true"), ("resourceVersion", version), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(chunk_s)), *_query(selectors)]
        timeout = (self.timeouts.connect_s, chunk_s + self.timeouts.watch_read_slack_s)
        what = f"watch {RESOURCES[kind].plural} {_where(namespace, selectors) if kind != 'Node' else ''}".rstrip()
        response = self._send("GET", kind, namespace, None, what, query=query, timeout=timeout, answer=lambda sent: sent)
        try:
            for line in response:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    status = event["object"]
                    message = status.get("message", "watch error")
                    if status.get("code") == 410:
                        raise errors.Gone(message)
                    # The server ended this watch, not the job's pods: any other error (a
                    # 500 while etcd recovers, a 429) is worth a fresh list, never an abort.
                    raise errors.TransientApiError(f"the watch ended with an error ({status.get('code')}): {message}")
                yield event["type"], event["object"]
        finally:
            # A stream left early still has the server writing to it: close it, not back to the pool.
            response.close()
            response.release_conn()
