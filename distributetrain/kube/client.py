"""The thin, idempotent layer between the manager and the Kubernetes API.

- Objects travel as plain JSON dicts (``_preload_content=False``): the builders make
  dicts, and listing 150,000 pods as dicts is far cheaper than as client models.
- API errors are translated here, once, into ``distributetrain.core.errors`` types.
- Creating an object that already exists is fine if the job owns it (a restarted
  manager adopts its job); deleting one that is gone is fine too.
- Every request has a connect and a read timeout (``ApiTimeouts``), applied in the REST
  layer so no call can go without, and urllib3's own retries are off: ``call`` is the
  one retry loop, and it logs every retry. Transient failures (connection refused while
  the apiserver restarts, timeouts, 429, 5xx) are retried with backoff until the retry
  deadline. So is "forbidden" for a while after such a failure: a restarted apiserver
  serves requests before its RBAC caches are synced and denies them meanwhile
  (kubernetes/kubernetes#121635).
- A watch is a chain of short watch requests, each resumed from the last
  resourceVersion. The server ends each one after ``watch_chunk_s``, so a read timeout a
  little longer than that means the connection went silent: a stalled connection hides
  an event for seconds, not until the server's watch timeout.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Protocol, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client import rest
from kubernetes.client.rest import ApiException
from kubernetes.config import incluster_config

from distributetrain.core import errors, names

log = logging.getLogger(__name__)

ENV_PREFIX = "DISTRIBUTETRAIN_API_"  # + an ApiTimeouts field in capitals overrides it


@dataclass(frozen=True)
class ApiTimeouts:
    """How long the manager waits on the Kubernetes API. Seconds.

    ``DISTRIBUTETRAIN_API_<FIELD>`` in the environment overrides a field (e.g.
    ``DISTRIBUTETRAIN_API_RETRY_DEADLINE_S=2``): the black-box tests use short ones to
    show an unresponsive apiserver costs a bounded time.
    """

    # TCP connect plus TLS handshake. A lost SYN is resent after 1 s and 3 s; beyond that
    # a fresh connection (call retries) is quicker than the kernel's next resend at 7 s.
    connect_s: float = 5.0
    # Longest silence within one non-watch response; the apiserver gives up on its own
    # requests after 60 s, but a page of 500 pods or a create answers in well under 1 s.
    read_s: float = 30.0
    # Transient failures are retried this long: it rides out an apiserver restart.
    retry_deadline_s: float = 90.0
    # Each watch request asks the server to end it after this (timeoutSeconds, whole
    # seconds); the apiserver sends a bookmark 2 s before, and the watch resumes at once.
    watch_chunk_s: float = 4.0
    # A watch silent this long past its chunk's end is stalled: reconnect. Chunk plus
    # slack (6 s) bounds how late an event can be seen on a stalled connection.
    watch_read_slack_s: float = 2.0

    @property
    def request(self) -> tuple[float, float]:
        """The (connect, read) pair urllib3 honours for a non-watch request."""
        return self.connect_s, self.read_s

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> ApiTimeouts:
        changes = {}
        for field in fields(cls):
            name = ENV_PREFIX + field.name.upper()
            if name in environ:
                changes[field.name] = _positive_seconds(name, environ[name])
        return cls(**changes)


def _positive_seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < math.inf:
        raise errors.UsageError(name, f"must be a positive number of seconds, e.g. 2.5, got {text!r}")
    return value


API_BACKOFF_FIRST_S = 0.1
API_BACKOFF_MAX_S = 2.0
# jobs.api passes this as its read timeout; the REST layer applies it anyway.
API_REQUEST_TIMEOUT_S = ApiTimeouts.read_s
LIST_PAGE_SIZE = 500
WATCH_RECONNECT_DELAY_S = 0.2  # after a broken watch stream: never a busy loop
# Objects come back as plain JSON (see the module docstring).
REQUEST_OPTIONS = {"_preload_content": False}
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"  # Kueue's aggregated API: pending workloads
VISIBILITY_VERSION = "v1beta1"  # served by Kueue since v0.9, and still by v0.19
# Creates and deletes of a job's pods are sent this many at a time: each is one round trip
# waiting mostly on etcd, so overlapping them is what makes 64 workers cost about 16.
API_CONCURRENCY = 8
# Connections kept open to the API server: the creates or deletes in flight, plus the pod
# watch, the Event sender and the annotation writer. urllib3 closes a connection returned
# to a full pool, and the next request pays a new TCP and TLS handshake.
API_CONNECTIONS = API_CONCURRENCY + 3
AUTHZ_SETTLE_S = 30.0  # after the API was unreachable, "forbidden" is retried this long
# Keepalive probes on idle connections: a pooled connection whose peer vanished without a
# FIN (node or netns gone) is reset after about 30 s, and so never reused to wait out a
# read timeout. Socket options missing on this platform are skipped.
TCP_KEEPALIVE_IDLE_S = 15
TCP_KEEPALIVE_INTERVAL_S = 5
TCP_KEEPALIVE_PROBES = 3
KEEPALIVE_SOCKET_OPTIONS = urllib3.connection.HTTPConnection.default_socket_options + [
    (level, getattr(socket, name), value)
    for level, name, value in (
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", TCP_KEEPALIVE_IDLE_S),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", TCP_KEEPALIVE_INTERVAL_S),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", TCP_KEEPALIVE_PROBES),
    )
    if hasattr(socket, name)
]

T = TypeVar("T")
A = TypeVar("A")


class TimedRestClient(rest.RESTClientObject):
    """The client's REST layer with a timeout on every request, and TCP keepalive.

    The generated client turns ``_request_timeout`` into a urllib3 timeout only for an
    int or a (connect, read) tuple; anything else, a float included, silently means no
    timeout at all. Here a tuple passes as it is, a number is the read timeout, and no
    timeout gets ``timeouts.request``.
    """

    def __init__(self, configuration: client.Configuration, timeouts: ApiTimeouts):
        super().__init__(configuration)
        self.timeouts = timeouts
        # Pools are created on first use, each from these keyword arguments.
        self.pool_manager.connection_pool_kw["socket_options"] = KEEPALIVE_SOCKET_OPTIONS

    def request(self, method, url, *args, _request_timeout=None, **kwargs):
        if isinstance(_request_timeout, tuple):
            timeout = _request_timeout
        elif _request_timeout:
            timeout = (self.timeouts.connect_s, float(_request_timeout))
        else:
            timeout = self.timeouts.request
        return super().request(method, url, *args, _request_timeout=timeout, **kwargs)


def make_api_client(configuration: client.Configuration, timeouts: ApiTimeouts | None = None) -> client.ApiClient:
    """An ApiClient whose every request has a timeout and is tried once (``call`` retries)."""
    # urllib3 would otherwise retry 3 times on its own: unlogged, each costing a timeout.
    configuration.retries = False
    configuration.connection_pool_maxsize = API_CONNECTIONS
    api_client = client.ApiClient(configuration)
    api_client.rest_client = TimedRestClient(configuration, timeouts or ApiTimeouts.from_environment())
    return api_client


def kubeconfig_path() -> str:
    """kubectl's default: ``$KUBECONFIG`` (files joined by ':'), else ~/.kube/config. Read
    at each call: the client library reads ``$KUBECONFIG`` once, when it is imported."""
    return os.environ.get("KUBECONFIG") or "~/.kube/config"


def uses_in_cluster(kubeconfig: str | None, context: str | None, *, in_cluster_first: bool) -> bool:
    """Whether ``load_api_client`` acts as the pod's ServiceAccount rather than a kubeconfig.

    ``in_cluster_first``: the manager, whose pod acts as its own ServiceAccount whatever
    files its image holds. Otherwise kubectl's order, for the user's commands (the CLI
    and the kubectl plugin in a notebook pod act as its user): ``--kubeconfig``,
    ``$KUBECONFIG``, ~/.kube/config, and the ServiceAccount only when none exists.
    """
    if kubeconfig is not None or context is not None:
        return False
    # client-go's InClusterConfig.Possible(): the service's env and the token file.
    in_a_pod = all(os.environ.get(name) for name in (incluster_config.SERVICE_HOST_ENV_NAME,
                                                     incluster_config.SERVICE_PORT_ENV_NAME))
    if not in_a_pod or not os.path.isfile(incluster_config.SERVICE_TOKEN_FILENAME):
        return False
    return in_cluster_first or not any(
        os.path.exists(os.path.expanduser(path)) for path in kubeconfig_path().split(os.pathsep) if path)


def load_api_client(
    kubeconfig: str | None = None, context: str | None = None, *, in_cluster_first: bool = False
) -> client.ApiClient:
    """The pod's ServiceAccount or a kubeconfig, as ``uses_in_cluster`` decides."""
    configuration = client.Configuration()
    if uses_in_cluster(kubeconfig, context, in_cluster_first=in_cluster_first):
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=kubeconfig or kubeconfig_path(), context=context,
                                client_configuration=configuration)
    return make_api_client(configuration)


def translate(error: Exception) -> errors.DistributeTrainError:
    """Map a client exception onto the project's error types."""
    if isinstance(error, ApiException):
        message = _api_message(error)
        if error.status == 404:
            return errors.NotFound(message)
        if error.status == 409:
            reason = _api_reason(error)
            return errors.AlreadyExists(message) if reason == "AlreadyExists" else errors.Conflict(message)
        if error.status == 410:
            return errors.Gone(message)
        if error.status == 403:
            return errors.forbidden(message)
        if error.status == 422:
            return errors.Invalid(message)
        if error.status in (429, 500, 502, 503, 504) or error.status == 0:
            return errors.TransientApiError(message)
        return errors.ApiError(message)
    if isinstance(error, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, OSError)):
        return errors.TransientApiError(f"cannot reach the Kubernetes API: {error}")
    return errors.ApiError(str(error))


def _api_body(error: ApiException) -> dict:
    try:
        return json.loads(error.body or "{}")
    except (TypeError, ValueError):
        return {}


def _api_message(error: ApiException) -> str:
    return _api_body(error).get("message") or f"HTTP {error.status} {error.reason}"


def _api_reason(error: ApiException) -> str:
    return _api_body(error).get("reason", "")


def is_transient(error: errors.DistributeTrainError) -> bool:
    return isinstance(error, errors.TransientApiError)


def call(
    operation: Callable[[], T],
    deadline_s: float = ApiTimeouts.retry_deadline_s,
    retryable: Callable[[errors.DistributeTrainError], bool] = is_transient,
    what: str = "API call",
) -> T:
    """Run one API call, translating errors and retrying ``retryable`` ones until the deadline.

    No attempt starts after the deadline, so the whole costs at most the deadline plus one
    request's timeouts. Every retry is one WARNING line: what failed, the attempt, the delay.
    """
    give_up_at = time.monotonic() + deadline_s
    delay = API_BACKOFF_FIRST_S
    attempt = 1
    while True:
        try:
            return operation()
        except Exception as e:  # noqa: BLE001 - every client error is translated here
            translated = translate(e)
            pause = delay * random.uniform(0.5, 1.0) + delay / 2
            if not retryable(translated) or time.monotonic() + pause > give_up_at:
                raise translated from e
            log.warning("%s failed (attempt %d), retrying in %.1fs: %s", what, attempt, pause, translated)
            time.sleep(pause)
            delay = min(delay * 2, API_BACKOFF_MAX_S)
            attempt += 1


def read_json(response) -> dict:
    return json.loads(response.data)


def drain(response) -> None:
    """Read and drop a body the manager does not need. A response left unread keeps its
    connection out of the pool for good, so the next request opens a new one (TCP and TLS)."""
    response.drain_conn()


def owner_uids(obj: dict) -> set[str]:
    """Who owns ``obj``: its owner references, and the manager UID label (the only record
    of the owner in another namespace, where owner references cannot point)."""
    owners = {ref.get("uid") for ref in obj["metadata"].get("ownerReferences") or ()}
    return owners | ({uid} if (uid := names.owner_uid_of(obj)) else set())


def _where(namespace: str | None, selectors: Mapping[str, str]) -> str:
    """How log lines name a set of pods: ``[namespace] selector``."""
    terms = " ".join(f"{value}" for value in selectors.values() if value)
    return f"[{namespace or 'all namespaces'}]" + (f" {terms}" if terms else "")


class KubeApi(Protocol):
    """Every call the manager makes: ``Kube`` below, and the unit tests' in-memory stand-in
    (tests/fakekube.py), which a test holds to these signatures."""

    def list_pages(
        self, kind: str, namespace: str | None = None, **selectors: str
    ) -> Iterator[tuple[list[dict], str]]: ...
    def list_all(self, kind: str, namespace: str | None = None, **selectors: str) -> tuple[list[dict], str]: ...
    def namespace_labels(self, name: str) -> dict[str, str] | None: ...
    def get_pod(self, namespace: str, name: str) -> dict | None: ...
    def read(self, kind: str, namespace: str, name: str) -> dict | None: ...
    def read_custom(self, group: str, version: str, plural: str, namespace: str | None, name: str) -> dict | None: ...
    def pending_workloads(self, namespace: str, local_queue: str) -> list[dict]: ...
    def create_owned(self, obj: dict, dry_run: bool = False) -> dict: ...
    def create_all_owned(self, objs: list[dict]) -> list[dict]: ...
    def delete(self, kind: str, namespace: str, name: str, grace_period_s: int | None = None) -> bool: ...
    def delete_all(self, kind: str, namespace: str, names: list[str]) -> list[str]: ...
    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None: ...
    def patch_pod(self, namespace: str, name: str, patch: dict | list[dict]) -> dict: ...
    def watch_pods(
        self, namespace: str | None, resource_version: str, timeout_s: float, **selectors: str
    ) -> Iterator[tuple[str, dict]]: ...
    def watch_nodes(self, resource_version: str, timeout_s: float) -> Iterator[tuple[str, dict]]: ...
    def get_lease(self, namespace: str, name: str) -> dict | None: ...
    def create_lease(self, lease: dict) -> dict: ...
    def replace_lease(self, lease: dict) -> dict: ...


class Kube(KubeApi):
    """The calls the manager makes, each one line of intent."""

    def __init__(self, api_client: client.ApiClient, timeouts: ApiTimeouts | None = None):
        self.api_client = api_client
        self.timeouts = timeouts or ApiTimeouts.from_environment()
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.requests = 0  # API requests made, for the benchmarks
        self._requests_lock = threading.Lock()
        self._unreachable_at = float("-inf")  # monotonic time the API last failed transiently

    def _call(self, operation: Callable[[], T], what: str = "API call") -> T:
        with self._requests_lock:
            self.requests += 1
        return call(operation, self.timeouts.retry_deadline_s, self._retryable, what)

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
            self._unreachable_at = time.monotonic()
            return True
        # A denial right after an outage is the restarted apiserver's unsynced RBAC cache;
        # one that persists past the settle time is real (exit code 77).
        return isinstance(error, errors.Forbidden) and time.monotonic() - self._unreachable_at < AUTHZ_SETTLE_S

    # -- reads -------------------------------------------------------------------------
    def list_pages(
        self, kind: str, namespace: str | None = None, **selectors: str
    ) -> Iterator[tuple[list[dict], str]]:
        """Yield (items, resourceVersion) page by page; kind is 'nodes' or 'pods'."""
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
        if kind == "nodes":
            return self.core.list_node(**kwargs)
        if namespace:
            return self.core.list_namespaced_pod(namespace, **kwargs)
        return self.core.list_pod_for_all_namespaces(**kwargs)

    def list_all(self, kind: str, namespace: str | None = None, **selectors: str) -> tuple[list[dict], str]:
        items, version = [], ""
        for page, version in self.list_pages(kind, namespace, **selectors):
            items.extend(page)
        return items, version

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        """The namespace's labels (its PodSecurity levels among them); None if it does not exist."""
        try:
            namespace = self._call(lambda: read_json(self.core.read_namespace(name, **REQUEST_OPTIONS)),
                                   f"read Namespace [{name}]")
        except errors.NotFound:
            return None
        return (namespace.get("metadata") or {}).get("labels") or {}

    def get_pod(self, namespace: str, name: str) -> dict | None:
        return self.read("Pod", namespace, name)

    # -- writes ------------------------------------------------------------------------
    def create_owned(self, obj: dict, dry_run: bool = False) -> dict:
        """Create, or adopt the existing object if it has the same owner as ``obj``."""
        kind, namespace, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        create = self.core.create_namespaced_pod if kind == "Pod" else self.core.create_namespaced_secret
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
            if existing is None or not (owner_uids(obj) & owner_uids(existing)):
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

    def read(self, kind: str, namespace: str, name: str) -> dict | None:
        read = self.core.read_namespaced_pod if kind == "Pod" else self.core.read_namespaced_secret
        try:
            return self._call(
                lambda: read_json(read(name, namespace, **REQUEST_OPTIONS)), f"read {kind} [{namespace}/{name}]"
            )
        except errors.NotFound:
            return None

    def read_custom(self, group: str, version: str, plural: str, namespace: str | None, name: str) -> dict | None:
        """A custom resource (a Kueue LocalQueue, a ClusterQueue when ``namespace`` is None); None if absent."""
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

    def pending_workloads(self, namespace: str, local_queue: str) -> list[dict]:
        """The workloads waiting in a Kueue LocalQueue, in queue order, from Kueue's
        visibility API (an aggregated API a cluster may not serve: NotFound then). One
        attempt, no retries: the answer is news, and the next one comes soon."""
        path = (f"/apis/{VISIBILITY_GROUP}/{VISIBILITY_VERSION}/namespaces/{namespace}/localqueues/"
                f"{local_queue}/pendingworkloads")

        def read() -> dict:
            return read_json(self.api_client.call_api(path, "GET", header_params={"Accept": "application/json"},
                                                      auth_settings=["BearerToken"], _return_http_data_only=True,
                                                      **REQUEST_OPTIONS))

        with self._requests_lock:
            self.requests += 1
        return call(read, 0, what=f"read pending workloads of [{namespace}/{local_queue}]").get("items") or []

    def delete(self, kind: str, namespace: str, name: str, grace_period_s: int | None = None) -> bool:
        """Delete in the background; True if it was there. 'Not found' is a state, not an error."""
        delete = self.core.delete_namespaced_pod if kind == "Pod" else self.core.delete_namespaced_secret
        body = client.V1DeleteOptions(grace_period_seconds=grace_period_s, propagation_policy="Background")
        try:
            self._call(
                lambda: drain(delete(name, namespace, body=body, **REQUEST_OPTIONS)),
                f"delete {kind} [{namespace}/{name}]",
            )
        except errors.NotFound:
            return False
        log.info("deleted %s [%s/%s]", kind, namespace, name)
        return True

    def delete_all(self, kind: str, namespace: str, names: list[str]) -> list[str]:
        """Delete each (in the background); return the names that were there."""
        found = self._concurrently(lambda name: self.delete(kind, namespace, name), names)
        return [name for name, was_there in zip(names, found) if was_there]

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
        give_up_at = time.monotonic() + timeout_s
        version = resource_version
        where = _where(namespace, selectors) if kind == "pods" else ""  # nodes have no namespace
        while (remaining := give_up_at - time.monotonic()) > 0:
            log.debug("watching %s %s from resourceVersion %s", kind, where, version)
            try:
                for event_type, obj in self._watch_request(kind, namespace, version, remaining, selectors):
                    version = obj["metadata"].get("resourceVersion") or version
                    yield event_type, obj
            except (urllib3.exceptions.HTTPError, OSError) as e:
                self._unreachable_at = time.monotonic()
                log.info("watch of %s %s broke (%s); reconnecting from resourceVersion %s", kind, where, e, version)
                time.sleep(min(WATCH_RECONNECT_DELAY_S, max(give_up_at - time.monotonic(), 0)))

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
        what = f"watch {kind} {_where(namespace, selectors)}" if kind == "pods" else f"watch {kind}"
        if kind == "nodes":
            response = self._call(lambda: self.core.list_node(**kwargs), what)
        elif namespace:
            response = self._call(lambda: self.core.list_namespaced_pod(namespace, **kwargs), what)
        else:
            response = self._call(lambda: self.core.list_pod_for_all_namespaces(**kwargs), what)
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

    # -- leases ------------------------------------------------------------------------
    def get_lease(self, namespace: str, name: str) -> dict | None:
        try:
            return self._call(
                lambda: read_json(self.coordination.read_namespaced_lease(name, namespace, **REQUEST_OPTIONS)),
                f"read Lease [{namespace}/{name}]",
            )
        except errors.NotFound:
            return None

    def create_lease(self, lease: dict) -> dict:
        namespace, name = lease["metadata"]["namespace"], lease["metadata"]["name"]
        return self._call(
            lambda: read_json(self.coordination.create_namespaced_lease(namespace, lease, **REQUEST_OPTIONS)),
            f"create Lease [{namespace}/{name}]",
        )

    def replace_lease(self, lease: dict) -> dict:
        namespace, name = lease["metadata"]["namespace"], lease["metadata"]["name"]
        return self._call(
            lambda: read_json(self.coordination.replace_namespaced_lease(name, namespace, lease, **REQUEST_OPTIONS)),
            f"replace Lease [{namespace}/{name}]",
        )
