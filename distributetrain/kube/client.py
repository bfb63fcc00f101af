"""The thin, idempotent layer between the manager and the Kubernetes API.

- Objects travel as plain JSON dicts (``_preload_content=False``): the builders make
  dicts, and listing 150,000 pods as dicts is far cheaper than as client models.
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

import functools
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
from distributetrain.kube.calls import call, drain, is_transient, read_json
from distributetrain.kube.connection import API_CONCURRENCY, ApiTimeouts
from distributetrain.kube.dra import LISTS as DRA_LISTS, DraCalls
from distributetrain.kube.gang import PodGroups
from distributetrain.kube.kueue import KueueReads
from distributetrain.kube.podlist import PodLister

log = logging.getLogger(__name__)

LIST_PAGE_SIZE = 500
WATCH_RECONNECT_DELAY_S = 0.2  # after a broken watch stream: never a busy loop
# Objects come back as plain JSON (see the module docstring).
REQUEST_OPTIONS = {"_preload_content": False}
# The client's names of list parameters: the API's.
QUERY_NAMES = {"field_selector": "fieldSelector", "label_selector": "labelSelector",
               "resource_version": "resourceVersion", "resource_version_match": "resourceVersionMatch"}
AUTHZ_SETTLE_S = 30.0  # after the API was unreachable, "forbidden" is retried this long

T = TypeVar("T")
A = TypeVar("A")


def _where(namespace: str | None, selectors: Mapping[str, str]) -> str:
    """How log lines name a set of pods: ``[namespace] selector``."""
    terms = " ".join(f"{value}" for value in selectors.values() if value)
    return f"[{namespace or 'all namespaces'}]" + (f" {terms}" if terms else "")


class Kube(DraCalls, KubeApi):
    """The calls the manager makes, each one line of intent."""

    def __init__(self, api_client: client.ApiClient, clock: Clock, timeouts: ApiTimeouts | None = None):
        self.api_client = api_client
        self.timeouts = timeouts or ApiTimeouts.from_environment()
        self.clock = clock  # of the retries' deadlines and delays, and of a watch's span
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.networking = client.NetworkingV1Api(api_client)
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

    # -- reads -------------------------------------------------------------------------
    def list_pages(
        self, kind: str, namespace: str | None = None, **selectors: str
    ) -> Iterator[tuple[list[dict], str]]:
        """Yield (items, resourceVersion) page by page; kind: nodes, pods, events (core/v1), resourcequotas."""
        token = None
        what = f"list {kind} {_where(namespace, selectors)}"
        while True:
            page = self._call(lambda: read_json(self._list(kind, namespace, token, selectors)), what)
            yield page.get("items") or [], page["metadata"].get("resourceVersion", "")
            token = page["metadata"].get("continue")
            if not token:
                return

    def _list(self, kind: str, namespace: str | None, token: str | None, selectors: dict):
        kwargs = dict(limit=LIST_PAGE_SIZE, **REQUEST_OPTIONS, **selectors)
        if token:
            kwargs["_continue"] = token
        return self._lister(kind, namespace)(**kwargs)

    def _lister(self, kind: str, namespace: str | None) -> Callable:
        """The list call of a kind; with ``watch=True`` it is the kind's watch."""
        if kind == "nodes" or kind in DRA_LISTS:  # cluster-wide (``kube.dra``: every namespace's claims)
            return self.core.list_node if kind == "nodes" else getattr(self.resource, DRA_LISTS[kind])
        namespaced = {"events": self.core.list_namespaced_event, "resourcequotas":
                      self.core.list_namespaced_resource_quota, "pods": self.core.list_namespaced_pod,
                      "leases": self.coordination.list_namespaced_lease,
                      "configmaps": self.core.list_namespaced_config_map}[kind]
        return functools.partial(namespaced, namespace) if namespace else self.core.list_pod_for_all_namespaces

    def each_pod_request(self, visit: Callable[[dict], None], restart: Callable[[], None], **selectors: str) -> str:
        """Every pod of the cluster, cut to what an inventory reads (``podwire``), to
        ``visit``; returns the list's resourceVersion. One request from the API server's
        watch cache, or pages where it reads the list from etcd (``podlist``); ``restart``
        forgets the pods visited before a list starts over."""
        query = [(QUERY_NAMES[key], value) for key, value in selectors.items()]
        return self.pod_lister.each_pod(visit, restart, query, f"list pods {_where(None, selectors)}")

    def list_all(self, kind: str, namespace: str | None = None, **selectors: str) -> tuple[list[dict], str]:
        items, version = [], ""
        for page, version in self.list_pages(kind, namespace, **selectors):
            items.extend(page)
        return items, version

    def namespace_metadata(self, name: str) -> dict | None:
        """Its labels (PodSecurity levels), annotations (OpenShift's UIDs); None if it does not exist."""
        try:
            namespace = self._call(lambda: read_json(self.core.read_namespace(name, **REQUEST_OPTIONS)),
                                   f"read Namespace [{name}]")
        except errors.NotFound:
            return None
        return namespace.get("metadata") or {}

    def resource_quotas(self, namespace: str) -> list[dict]:
        """The namespace's ResourceQuotas: a handful, one request."""
        return self.list_all("resourcequotas", namespace)[0]

    def get_pod(self, namespace: str, name: str) -> dict | None:
        return self.read("Pod", namespace, name)

    # -- writes ------------------------------------------------------------------------
    def _typed(self, verb: str, kind: str) -> Callable:
        """The typed client's ``verb`` ("create", "read", "delete") of a namespaced kind the job creates or reads."""
        api, resource = {"Pod": (self.core, "pod"), "Secret": (self.core, "secret"),
                         "ConfigMap": (self.core, "config_map"), "Lease": (self.coordination, "lease"),
                         "PersistentVolumeClaim": (self.core, "persistent_volume_claim"),
                         "NetworkPolicy": (self.networking, "network_policy"), **self.dra_kinds,
                         "PodGroup": (self.pod_groups.api, "pod_group")}[kind]
        return getattr(api, f"{verb}_namespaced_{resource}")

    def create_owned(self, obj: dict, dry_run: bool = False) -> dict:
        """Create, or adopt the existing object if it has the same owner as ``obj``."""
        kind, namespace, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        create = self._typed("create", kind)
        extra = {"dry_run": "All"} if dry_run else {}
        try:
            created = self._call(
                lambda: read_json(create(namespace, obj, **REQUEST_OPTIONS, **extra)),
                f"create {kind} [{namespace}/{name}]" + (" (dry run)" if dry_run else ""),
            )
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

    def create(self, obj: dict, dry_run: bool = False) -> dict:
        """Create; ``AlreadyExists`` if the name is taken (whoever's it is)."""
        kind, namespace, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        create = self._typed("create", kind)
        extra = {"dry_run": "All"} if dry_run else {}
        return self._call(lambda: read_json(create(namespace, obj, **REQUEST_OPTIONS, **extra)),
                          f"create {kind} [{namespace}/{name}]" + (" (dry run)" if dry_run else ""))

    def update(self, obj: dict) -> dict:
        """Update the whole object as read (its resourceVersion: ``Conflict`` if it changed since)."""
        kind, namespace, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        update = self._typed("replace", kind)  # the client's name for the update verb (PUT)
        return self._call(lambda: read_json(update(name, namespace, obj, **REQUEST_OPTIONS)),
                          f"update {kind} [{namespace}/{name}]")

    def create_all_owned(self, objs: list[dict]) -> list[dict]:
        return self._concurrently(self.create_owned, objs)

    def read(self, kind: str, namespace: str | None, name: str) -> dict | None:
        """None if absent; ``namespace`` None: a cluster-scoped PersistentVolume."""
        read = functools.partial(self._typed("read", kind), namespace=namespace) if namespace is not None else \
            {"PersistentVolume": self.core.read_persistent_volume}[kind]
        try:
            return self._call(lambda: read_json(read(name, **REQUEST_OPTIONS)), f"read {kind} [{namespace or ''}/{name}]")
        except errors.NotFound:
            return None

    def read_custom(self, group: str, version: str, plural: str, namespace: str | None, name: str) -> dict | None:
        """An object of an API group the client has no typed call for (a StorageClass); None if absent."""
        if namespace is None:
            def read() -> dict:
                return read_json(self.custom.get_cluster_custom_object(group, version, plural, name, **REQUEST_OPTIONS))
        else:
            def read() -> dict:
                return read_json(self.custom.get_namespaced_custom_object(group, version, namespace, plural, name,
                                                                          **REQUEST_OPTIONS))
        try:
            return self._call(read, f"read {plural}.{group} [{namespace or ''}/{name}]")
        except errors.NotFound:
            return None

    def kueue_version(self) -> str | None:
        """The version of Kueue's API the manager reads, decided once (``kube.kueue``)."""
        return self.kueue.version()

    def read_kueue(self, plural: str, namespace: str | None, name: str) -> dict | None:
        """A LocalQueue, or a ClusterQueue or ResourceFlavor (``namespace`` None); None if absent."""
        return self.kueue.read(plural, namespace, name)

    def pending_workloads(self, namespace: str, local_queue: str) -> list[dict]:
        """A LocalQueue's pending workloads from Kueue's visibility API, tried once."""
        return self.kueue.pending_workloads(namespace, local_queue)

    def serves_pod_groups(self) -> bool:
        """Whether the job's pods may be a gang (``kube.gang``): decided once, refused at most once."""
        return self.pod_groups.served()

    def refuse_pod_groups(self, why: str) -> None:
        self.pod_groups.refused(why)

    def delete_pod_groups(self, namespace: str, label_selector: str) -> list[str]:
        return self.pod_groups.delete(namespace, label_selector)

    def delete(self, kind: str, namespace: str, name: str, grace_period_s: int | None = None) -> bool:
        """Delete in the background; True if it was there. 'Not found' is a state, not an error."""
        delete = self._typed("delete", kind)
        body = client.V1DeleteOptions(grace_period_seconds=grace_period_s, propagation_policy="Background")
        try:
            self._call(lambda: drain(delete(name, namespace, body=body, **REQUEST_OPTIONS)),
                       f"delete {kind} [{namespace}/{name}]")
        except errors.NotFound:
            return False
        log.info("deleted %s [%s/%s]", kind, namespace, name)
        return True

    def delete_all(self, kind: str, namespace: str, names: list[str]) -> list[str]:
        """Delete each (in the background); return the names that were there."""
        found = self._concurrently(lambda name: self.delete(kind, namespace, name), names)
        return [name for name, was_there in zip(names, found) if was_there]

    def delete_pods(self, namespace: str, label_selector: str, field_selector: str = "") -> list[str]:
        """Delete every selected pod in one request (deletecollection; in the background, each
        with its own grace period); return the names the server deleted, sorted."""
        where = f"[{namespace}] {label_selector} {field_selector}".rstrip()
        answer = self._call(lambda: read_json(self.core.delete_collection_namespaced_pod(
            namespace, body=client.V1DeleteOptions(propagation_policy="Background"), label_selector=label_selector,
            field_selector=field_selector or None, **REQUEST_OPTIONS)), f"delete pods {where}")
        deleted = sorted(item["metadata"]["name"] for item in answer.get("items") or ())
        log.info("deleted pods %s: %s", where, ", ".join(deleted) or "none")
        return deleted

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        """Patch annotations (None removes one)."""
        patch = {"metadata": {"annotations": annotations}}
        self._call(
            # A dict body is sent as a strategic merge patch: null removes an annotation.
            lambda: drain(self.core.patch_namespaced_pod(name, namespace, patch, **REQUEST_OPTIONS)),
            f"annotate Pod [{namespace}/{name}]",
        )

    def patch_pod(self, namespace: str, name: str, patch: dict | list[dict]) -> dict:
        """A strategic merge patch (a dict) or a JSON patch (a list of operations, whose
        ``test`` makes it conditional); returns the pod as patched."""
        return self._call(
            # The client sends a list as application/json-patch+json, a dict as a merge patch.
            lambda: read_json(self.core.patch_namespaced_pod(name, namespace, patch, **REQUEST_OPTIONS)),
            f"patch Pod [{namespace}/{name}]",
        )

    # -- watches -----------------------------------------------------------------------
    def watch_pods(
        self, namespace: str | None, resource_version: str, timeout_s: float, **selectors: str
    ) -> Iterator[tuple[str, dict]]:
        return self._watch("pods", namespace, resource_version, timeout_s, selectors)

    def watch_nodes(self, resource_version: str, timeout_s: float) -> Iterator[tuple[str, dict]]:
        return self._watch("nodes", None, resource_version, timeout_s, {})

    def watch_resource_quotas(self, namespace: str, resource_version: str,
                              timeout_s: float) -> Iterator[tuple[str, dict]]:
        return self._watch("resourcequotas", namespace, resource_version, timeout_s, {})

    def watch_events(
        self, namespace: str, resource_version: str, timeout_s: float, **selectors: str
    ) -> Iterator[tuple[str, dict]]:
        """core/v1 Events of one namespace (the kubelet's about pods: image pulls)."""
        return self._watch("events", namespace, resource_version, timeout_s, selectors)

    def watch_one(self, kind: str, namespace: str, name: str, resource_version: str,
                  timeout_s: float) -> Iterator[tuple[str, dict]]:
        """One object's changes from ``resource_version``: a Lease ("leases", the placement
        lock waits on it) or a ConfigMap ("configmaps", the published survey)."""
        return self._watch(kind, namespace, resource_version, timeout_s, {"field_selector": f"metadata.name={name}"})

    def _watch(
        self, kind: str, namespace: str | None, resource_version: str, timeout_s: float, selectors: Mapping[str, str]
    ) -> Iterator[tuple[str, dict]]:
        """Watch events (type, object), bookmarks included, from ``resource_version`` for ``timeout_s``.

        One watch request per ``watch_chunk_s``, each resumed from the last resourceVersion
        seen; so is a request whose stream broke or went silent (one INFO line says so).
        Raises ``errors.Gone`` when the version is too old, and ``errors.TransientApiError``
        when the server ends the watch with another error or stays unreachable past the
        retry deadline: the caller lists again either way.
        """
        give_up_at = self.clock.monotonic() + timeout_s
        version = resource_version
        where = "" if kind == "nodes" else _where(namespace, selectors)  # nodes have no namespace
        while (remaining := give_up_at - self.clock.monotonic()) > 0:
            log.debug("watching %s %s from resourceVersion %s", kind, where, version)
            try:
                for event_type, obj in self._watch_request(kind, namespace, version, remaining, selectors):
                    version = obj["metadata"].get("resourceVersion") or version
                    yield event_type, obj
            except (urllib3.exceptions.HTTPError, OSError) as e:
                self._unreachable_at = self.clock.monotonic()
                log.info("watch of %s %s broke (%s); reconnecting from resourceVersion %s", kind, where, e, version)
                self.clock.sleep(min(WATCH_RECONNECT_DELAY_S, give_up_at - self.clock.monotonic()))

    def _watch_request(
        self, kind: str, namespace: str | None, version: str, remaining_s: float, selectors: Mapping[str, str]
    ) -> Iterator[tuple[str, dict]]:
        """One watch request: its events until the server ends it (or the stream breaks)."""
        chunk_s = max(1, math.ceil(min(remaining_s, self.timeouts.watch_chunk_s)))
        kwargs = dict(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=chunk_s,
            _preload_content=False,
            _request_timeout=(self.timeouts.connect_s, chunk_s + self.timeouts.watch_read_slack_s),
            **selectors,
        )
        what = f"watch {kind}" if kind == "nodes" else f"watch {kind} {_where(namespace, selectors)}"
        response = self._call(lambda: self._lister(kind, namespace)(**kwargs), what)
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
