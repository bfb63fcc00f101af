"""One API call: its errors translated once, its transient failures retried.

API errors are translated here, once, into ``distributetrain.core.errors`` types, with
the message and reason of the error's Status, in JSON or in protobuf (``protowire``).
``call`` is the one retry loop (urllib3's retries are off), and it logs every retry.
Transient failures (connection refused while the apiserver restarts, timeouts, 429,
5xx) are retried with backoff until the retry deadline.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Iterable
from typing import TypeVar

import urllib3
from kubernetes.client.rest import ApiException

from distributetrain.core import errors
from distributetrain.core.clock import Clock
from distributetrain.kube import protowire
from distributetrain.kube.connection import ApiTimeouts

log = logging.getLogger(__name__)

T = TypeVar("T")

API_BACKOFF_FIRST_S = 0.1
API_BACKOFF_MAX_S = 2.0


def translate(error: Exception) -> errors.DistributeTrainError:
    """Map a client exception onto the project's error types."""
    if isinstance(error, ApiException):
        message = _api_message(error)
        if 400 <= error.status < 500 and errors.POLICY_OR_WEBHOOK_REFUSAL.search(message):
            return errors.AdmissionRefused(message)
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
    """The error's Status, in JSON or, for a request that asked for protobuf, in protobuf."""
    body = error.body or b""
    if isinstance(body, bytes) and (decoded := protowire.status(body)) is not None:
        return decoded
    try:
        return json.loads(body or "{}")
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
    clock: Clock,
    deadline_s: float = ApiTimeouts.retry_deadline_s,
    retryable: Callable[[errors.DistributeTrainError], bool] = is_transient,
    what: str = "API call",
) -> T:
    """Run one API call, translating errors and retrying ``retryable`` ones until the deadline.

    No attempt starts after the deadline, so the whole costs at most the deadline plus one
    request's timeouts. Every retry is one WARNING line: what failed, the attempt, the delay.
    """
    give_up_at = clock.monotonic() + deadline_s
    delay = API_BACKOFF_FIRST_S
    attempt = 1
    while True:
        try:
            return operation()
        except Exception as e:  # noqa: BLE001 - every client error is translated here
            translated = translate(e)
            pause = delay * random.uniform(0.5, 1.0) + delay / 2
            if not retryable(translated) or clock.monotonic() + pause > give_up_at:
                raise translated from e
            log.warning("%s failed (attempt %d), retrying in %.1fs: %s", what, attempt, pause, translated)
            clock.sleep(pause)
            delay = min(delay * 2, API_BACKOFF_MAX_S)
            attempt += 1


def read_json(response) -> dict:
    return json.loads(response.data)


def drain(response) -> None:
    """Read and drop a body the manager does not need. A response left unread keeps its
    connection out of the pool for good, so the next request opens a new one (TCP and TLS)."""
    response.drain_conn()


def send(api_client, method: str, path: str, query: Iterable[tuple[str, str]] = (), body: object = None, *,
         accept: str = "application/json", content_type: str | None = None,
         timeout: tuple[float, float] | None = None):
    """One HTTP request to the API server as the client's credentials allow, its response
    unread: every request of ``kube`` is this one (the client's REST layer adds the timeouts)."""
    headers = {"Accept": accept, **({"Content-Type": content_type} if content_type else {})}
    return api_client.call_api(path, method, query_params=list(query), header_params=headers, body=body,
                               auth_settings=["BearerToken"], _return_http_data_only=True,
                               _preload_content=False, _request_timeout=timeout)
