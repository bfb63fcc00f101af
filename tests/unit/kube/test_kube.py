"""The API layer without a server: its timeouts, its retry policy and its concurrent calls."""

import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import urllib3
from kubernetes import client
from kubernetes.client import rest
from kubernetes.client.rest import ApiException

from distributetrain.core import errors
from distributetrain.core.clock import FakeClock
from distributetrain.kube.calls import call
from distributetrain.kube.client import Kube
from distributetrain.kube.connection import API_CONCURRENCY, ApiTimeouts, TimedRestClient, make_api_client


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
    """Its retries' delays and deadlines on a fake clock: each sleep moves it at once."""
    return Kube(api_client=None, clock=FakeClock())


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
    client._unreachable_at = client.clock.monotonic()  # what a broken watch stream records
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


def test_concurrent_calls_return_in_order_and_stop_at_the_first_error(monkeypatch):
    assert Kube._concurrently(lambda item: item * 2, [0, 1, 2]) == [0, 2, 4]
    # Items 0-2 are in flight when item 3 fails (they go on once it has); every later item
    # that gets a thread holds it until the caller has dropped the rest, so the rest are
    # dropped however the threads are scheduled.
    failed, dropped, started, finished, futures = threading.Event(), threading.Event(), [], [], []

    def on_done(future):
        if future.cancelled() and all(each.done() or each.running() for each in futures):
            dropped.set()  # the caller has cancelled every call not started

    class Pool(ThreadPoolExecutor):
        def submit(self, *args, **kwargs):
            futures.append(super().submit(*args, **kwargs))
            futures[-1].add_done_callback(on_done)
            return futures[-1]

    monkeypatch.setattr("distributetrain.kube.client.ThreadPoolExecutor", Pool)

    def operation(item):
        started.append(item)
        if item == 3:
            failed.set()
            raise errors.NotFound("three")
        assert (failed if item < 3 else dropped).wait(60), "the caller never went on"
        finished.append(item)

    with pytest.raises(errors.NotFound):
        Kube._concurrently(operation, range(100))
    # Nothing runs behind the caller: every call started has returned and the pool's threads are gone.
    assert sorted(finished) == sorted(set(started) - {3}) and len(started) <= 3 + 1 + API_CONCURRENCY
    assert not [t for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor")]


def test_timeouts_come_from_the_environment_and_bad_ones_are_refused():
    assert ApiTimeouts.from_environment({}) == ApiTimeouts()
    overridden = ApiTimeouts.from_environment({"DISTRIBUTETRAIN_API_READ_S": "1.5",
                                               "DISTRIBUTETRAIN_API_RETRY_DEADLINE_S": "2"})
    assert (overridden.read_s, overridden.retry_deadline_s, overridden.connect_s) == (1.5, 2.0, ApiTimeouts.connect_s)
    for bad in ("0", "-1", "soon", "inf", "nan"):
        with pytest.raises(errors.UsageError, match="DISTRIBUTETRAIN_API_CONNECT_S: must be a positive number"):
            ApiTimeouts.from_environment({"DISTRIBUTETRAIN_API_CONNECT_S": bad})


@pytest.mark.parametrize("requested, sent", [
    (None, (5.0, 30.0)),
    (30.0, (5.0, 30.0)),  # a float: the generated client would have dropped it
    (7, (5.0, 7.0)),  # an int: the generated client would have made it a total, streams included
    ((1.0, None), (1.0, None)),  # a log followed for hours: no read timeout, on purpose
])
def test_every_request_gets_a_connect_and_read_timeout(monkeypatch, requested, sent):
    seen = []
    monkeypatch.setattr(rest.RESTClientObject, "request",
                        lambda self, method, url, *args, _request_timeout=None, **kwargs: seen.append(_request_timeout))
    rest_client = TimedRestClient(client.Configuration(), ApiTimeouts())
    rest_client.GET("http://127.0.0.1:1/api", _request_timeout=requested)
    assert seen == [sent]


def test_the_client_never_retries_behind_the_logged_loop_and_probes_idle_connections():
    api_client = make_api_client(client.Configuration(), ApiTimeouts())
    assert api_client.configuration.retries is False
    options = api_client.rest_client.pool_manager.connection_pool_kw["socket_options"]
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in options
    assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) in options  # urllib3's default is kept


def test_every_retry_is_one_line_saying_what_failed_the_attempt_and_the_delay(caplog):
    refused = urllib3.exceptions.NewConnectionError(None, "connection refused")
    operation, calls = failing(refused, refused)
    assert call(operation, what="list pods [ns]", clock=FakeClock()) == "ok"
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == len(calls) - 1 == 2
    for attempt, line in enumerate(lines, 1):
        assert line.startswith(f"list pods [ns] failed (attempt {attempt}), retrying in ")
        assert "cannot reach the Kubernetes API" in line and line.endswith("connection refused")


def test_retries_stop_at_the_deadline():
    refused = urllib3.exceptions.NewConnectionError(None, "connection refused")
    operation, calls = failing(*[refused] * 100)
    clock = FakeClock()
    started = clock.monotonic()
    with pytest.raises(errors.TransientApiError):
        call(operation, deadline_s=0.5, clock=clock)
    assert clock.monotonic() - started < 0.5 and 2 <= len(calls) < 10


def test_a_cancellation_during_a_request_stays_a_cancellation():
    """SIGTERM's handler raises Cancelled wherever the main thread is, often in a request."""
    cancelled = errors.Cancelled("received SIGTERM")
    operation, calls = failing(cancelled)
    with pytest.raises(errors.Cancelled) as raised:
        call(operation, clock=FakeClock())
    assert raised.value is cancelled and len(calls) == 1
