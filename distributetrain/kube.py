"""The thin, idempotent layer between the manager and the Kubernetes API.

- Objects travel as plain JSON dicts (``_preload_content=False``): the builders make
  dicts, and listing 150,000 pods as dicts is far cheaper than as client models.
- API errors are translated here, once, into ``distributetrain.errors`` types.
- Creating an object that already exists is fine if the job owns it (a restarted
  manager adopts its job); deleting one that is gone is fine too.
- Transient failures (connection refused while the apiserver restarts, 429, 5xx) are
  retried with backoff until ``API_RETRY_DEADLINE_S``. So is "forbidden" for a while
  after such a failure: a restarted apiserver serves requests before its RBAC caches
  are synced and denies them meanwhile (kubernetes/kubernetes#121635).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from distributetrain import errors

log = logging.getLogger(__name__)

API_RETRY_DEADLINE_S = 90.0  # long enough to ride out an apiserver restart
API_BACKOFF_MAX_S = 2.0
API_REQUEST_TIMEOUT_S = 30.0
LIST_PAGE_SIZE = 500
WATCH_READ_SLACK_S = 15.0  # client read timeout beyond the server's watch timeout
# Plain JSON back, and no request waits forever on a connection the apiserver dropped.
REQUEST_OPTIONS = {"_preload_content": False, "_request_timeout": API_REQUEST_TIMEOUT_S}
# Creates and deletes of a job's pods are sent this many at a time: each is one round trip
# waiting mostly on etcd, so overlapping them is what makes 64 workers cost about 16.
API_CONCURRENCY = 8
AUTHZ_SETTLE_S = 30.0  # after the API was unreachable, "forbidden" is retried this long

T = TypeVar("T")
A = TypeVar("A")


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """In-cluster config inside a pod, else the kubeconfig (``KUBECONFIG``, ~/.kube/config)."""
    if kubeconfig is None and context is None:
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            pass
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    return client.ApiClient(configuration)


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
    deadline_s: float = API_RETRY_DEADLINE_S,
    retryable: Callable[[errors.DistributeTrainError], bool] = is_transient,
) -> T:
    """Run one API call, translating errors and retrying ``retryable`` ones until the deadline."""
    give_up_at = time.monotonic() + deadline_s
    delay = 0.1
    while True:
        try:
            return operation()
        except Exception as e:  # noqa: BLE001 - every client error is translated here
            translated = translate(e)
            if not retryable(translated) or time.monotonic() + delay > give_up_at:
                raise translated from e
            log.warning("API call failed, retrying in %.1fs: %s", delay, translated)
            time.sleep(delay * random.uniform(0.5, 1.0) + delay / 2)
            delay = min(delay * 2, API_BACKOFF_MAX_S)


def read_json(response) -> dict:
    return json.loads(response.data)


def owner_uids(obj: dict) -> set[str]:
    return {ref.get("uid") for ref in obj["metadata"].get("ownerReferences") or ()}


class Kube:
    """The calls the manager makes, each one line of intent."""

    def __init__(self, api_client: client.ApiClient):
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.requests = 0  # API requests made, for the benchmarks
        self._requests_lock = threading.Lock()
        self._unreachable_at = float("-inf")  # monotonic time the API last failed transiently

    def _call(self, operation: Callable[[], T]) -> T:
        with self._requests_lock:
            self.requests += 1
        return call(operation, retryable=self._retryable)

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
        while True:
            page = self._call(lambda: read_json(self._list(kind, namespace, token, selectors)))
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

    def namespace_exists(self, name: str) -> bool:
        try:
            self._call(lambda: self.core.read_namespace(name, **REQUEST_OPTIONS))
        except errors.NotFound:
            return False
        return True

    def get_pod(self, namespace: str, name: str) -> dict | None:
        try:
            return self._call(
                lambda: read_json(self.core.read_namespaced_pod(name, namespace, **REQUEST_OPTIONS))
            )
        except errors.NotFound:
            return None

    # -- writes ------------------------------------------------------------------------
    def create_owned(self, obj: dict, dry_run: bool = False) -> dict:
        """Create, or adopt the existing object if it has the same owner as ``obj``."""
        kind, namespace, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        create = self.core.create_namespaced_pod if kind == "Pod" else self.core.create_namespaced_secret
        extra = {"dry_run": "All"} if dry_run else {}
        try:
            created = self._call(lambda: read_json(create(namespace, obj, **REQUEST_OPTIONS, **extra)))
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
            return self._call(lambda: read_json(read(name, namespace, **REQUEST_OPTIONS)))
        except errors.NotFound:
            return None

    def delete(self, kind: str, namespace: str, name: str, grace_period_s: int | None = None) -> bool:
        """Delete in the background; True if it was there. 'Not found' is a state, not an error."""
        delete = self.core.delete_namespaced_pod if kind == "Pod" else self.core.delete_namespaced_secret
        body = client.V1DeleteOptions(grace_period_seconds=grace_period_s, propagation_policy="Background")
        try:
            self._call(lambda: delete(name, namespace, body=body, **REQUEST_OPTIONS))
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
            lambda: self.core.patch_namespaced_pod(name, namespace, patch, **REQUEST_OPTIONS)
        )

    # -- watches -----------------------------------------------------------------------
    def watch_pods(
        self, namespace: str | None, resource_version: str, timeout_s: float, **selectors: str
    ) -> Iterator[tuple[str, dict]]:
        """Raw watch events (type, object) from ``resource_version`` until the server ends it.

        Raises ``errors.Gone`` when the version is too old; the caller relists.
        """
        kwargs = dict(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=max(1, int(timeout_s)),
            _preload_content=False,
            _request_timeout=(API_REQUEST_TIMEOUT_S, timeout_s + WATCH_READ_SLACK_S),
            **selectors,
        )
        if namespace:
            response = self._call(lambda: self.core.list_namespaced_pod(namespace, **kwargs))
        else:
            response = self._call(lambda: self.core.list_pod_for_all_namespaces(**kwargs))
        try:
            for line in response:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    status = event["object"]
                    if status.get("code") == 410:
                        raise errors.Gone(status.get("message", "resource version too old"))
                    raise errors.ApiError(status.get("message", "watch error"))
                yield event["type"], event["object"]
        except (urllib3.exceptions.HTTPError, OSError) as e:
            self._unreachable_at = time.monotonic()
            raise errors.TransientApiError(f"watch interrupted: {e}") from e
        finally:
            response.release_conn()

    # -- leases ------------------------------------------------------------------------
    def get_lease(self, namespace: str, name: str) -> dict | None:
        try:
            return self._call(
                lambda: read_json(self.coordination.read_namespaced_lease(name, namespace, **REQUEST_OPTIONS))
            )
        except errors.NotFound:
            return None

    def create_lease(self, lease: dict) -> dict:
        namespace = lease["metadata"]["namespace"]
        return self._call(
            lambda: read_json(self.coordination.create_namespaced_lease(namespace, lease, **REQUEST_OPTIONS))
        )

    def replace_lease(self, lease: dict) -> dict:
        namespace, name = lease["metadata"]["namespace"], lease["metadata"]["name"]
        return self._call(
            lambda: read_json(self.coordination.replace_namespaced_lease(name, namespace, lease, **REQUEST_OPTIONS))
        )
