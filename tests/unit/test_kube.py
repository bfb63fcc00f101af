"""The API layer without a server: its retry policy and its concurrent calls."""

import time

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from distributetrain import errors
from distributetrain.kube import Kube


def forbidden() -> ApiException:
    error = ApiException(status=403, reason="Forbidden")
    error.body = '{"reason": "Forbidden", "message": "pods is forbidden"}'
    return error


def failing(*failures: Exception):
    """An operation that raises ``failures`` in turn, then returns "ok"; counts its calls."""
    calls = []

    def operation():
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return "ok"

    return operation, calls


def kube() -> Kube:
    return Kube(api_client=None)


def test_forbidden_on_a_healthy_connection_is_final():
    operation, calls = failing(forbidden())
    with pytest.raises(errors.Forbidden):
        kube()._call(operation)
    assert len(calls) == 1


def test_forbidden_right_after_an_outage_is_retried():
    # The restarted apiserver first refuses connections, then denies until RBAC syncs.
    refused = urllib3.exceptions.NewConnectionError(None, "connection refused")
    operation, calls = failing(refused, forbidden(), forbidden())
    assert kube()._call(operation) == "ok"
    assert len(calls) == 4


def test_forbidden_after_a_broken_watch_is_retried():
    client = kube()
    client._unreachable_at = time.monotonic()  # what a broken watch stream records
    operation, calls = failing(forbidden())
    assert client._call(operation) == "ok"
    assert len(calls) == 2


def test_forbidden_long_after_an_outage_is_final():
    client = kube()
    client._unreachable_at = -1_000.0
    operation, calls = failing(forbidden())
    with pytest.raises(errors.Forbidden):
        client._call(operation)
    assert len(calls) == 1


def test_concurrent_calls_return_in_order_and_stop_at_the_first_error():
    seen = []

    def operation(item):
        time.sleep(0.01)
        seen.append(item)
        if item == 3:
            raise errors.NotFound("three")
        return item * 2

    assert Kube._concurrently(operation, [0, 1, 2]) == [0, 2, 4]
    seen.clear()
    with pytest.raises(errors.NotFound):
        Kube._concurrently(operation, range(100))
    called = len(seen)
    time.sleep(0.1)
    assert len(seen) == called < 100  # nothing runs behind the caller, and the rest was not started
