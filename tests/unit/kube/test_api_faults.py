"""The API layer against misbehaving servers on 127.0.0.1, black-box, no cluster: every
request times out, urllib3 never retries behind the project's own logged loop, and a
watch whose connection stalls, or that ends with an error, goes on."""

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from distributetrain.core import errors, exitcodes
from distributetrain.core.clock import RealClock
from distributetrain.kube import waits
from distributetrain.kube.client import WATCH_RECONNECT_DELAY_S
from distributetrain.kube.connection import ApiTimeouts
from distributetrain.manager.watching import podwaits
from harness.apiserver import CLOSED, SILENT, FakeApiServer, HttpFake, Reply, kube_at, kubeconfig
from harness.builders import pod
from harness.waiting import wait_until

REPO = Path(__file__).resolve().parents[3]
SHORT = ApiTimeouts(connect_s=1.0, read_s=0.5, retry_deadline_s=1.0, watch_chunk_s=1.0, watch_read_slack_s=0.5)
JOB_LABELS = {"distributetrain.io/job": "j"}
SELECTOR = "distributetrain.io/job=j"
NOTICE_WITHIN_S = 10.0  # a worker lost mid-training, with the default timeouts
# What a request on a loaded machine adds to the bound a stalled watch is noticed within.
REQUEST_SLACK_S = 1.5

# The manager against a dead apiserver, with short timeouts from the environment.
MANAGER_ENV = {"DISTRIBUTETRAIN_API_CONNECT_S": "0.5", "DISTRIBUTETRAIN_API_READ_S": "0.5",
               "DISTRIBUTETRAIN_API_RETRY_DEADLINE_S": "1"}
# Pre-training gives up on its first call, then teardown on its own: two retry deadlines,
# each plus one request's timeouts and a backoff; then Python's start and the Events flush.
MANAGER_EXITS_WITHIN_S = 2 * (1 + 0.5 + 0.5 + 2) + 15
HANG_S = 90  # the test's own hard limit, for a manager that never exits


def job_pods():
    return [pod("j-chief", labels=JOB_LABELS), pod("j-worker-0", labels=JOB_LABELS)]


def chief_finished():
    return podwaits.chief_finished("j-chief", ["j-worker-0"])


@pytest.mark.parametrize("behaviour", [SILENT, CLOSED], ids=["silent", "close"])
def test_the_manager_exits_76_in_bounded_time_when_the_api_never_answers(tmp_path, behaviour):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "MANAGER_POD_", "DISTRIBUTETRAIN_"))}
    with HttpFake(lambda request: behaviour) as server:
        argv = [sys.executable, "-m", "distributetrain", "pre-training",
                "--kubeconfig", kubeconfig(tmp_path / "kubeconfig", server.url),
                "--num-gpus", "1", "--image", "img:1", "--job-name", "hang", "--namespace", "ns"]
        started = time.monotonic()
        try:
            result = subprocess.run(argv, cwd=REPO, env={**env, **MANAGER_ENV}, capture_output=True, text=True,
                                    timeout=HANG_S)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"the manager hung: still running after {HANG_S}s\n{e.stderr}")
        elapsed = time.monotonic() - started
    assert result.returncode == exitcodes.API_ERROR, result.stderr
    assert elapsed < MANAGER_EXITS_WITHIN_S, result.stderr
    assert "cannot reach the Kubernetes API" in result.stderr
    assert "failed (attempt 1), retrying in" in result.stderr


@pytest.mark.parametrize("behaviour", [SILENT, CLOSED], ids=["silent", "close"])
def test_each_attempt_is_one_connection_and_each_retry_one_log_line(caplog, behaviour):
    caplog.set_level(logging.WARNING, logger="distributetrain.kube.client")
    with HttpFake(lambda request: behaviour) as server:
        started = time.monotonic()
        with pytest.raises(errors.TransientApiError):
            kube_at(server.url, SHORT).read("Pod", "ns", "p")
        elapsed = time.monotonic() - started
    retries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("read Pod [ns/p] failed")]
    assert [line.split("(attempt ")[1].split(")")[0] for line in retries] == [
        str(n) for n in range(1, len(retries) + 1)]
    # urllib3's own retries would have opened 4 connections per attempt, unlogged.
    assert server.connections == len(retries) + 1 >= 2
    assert elapsed < SHORT.retry_deadline_s + SHORT.connect_s + SHORT.read_s + 1


def test_connections_have_tcp_keepalive():
    with FakeApiServer(job_pods()) as server:
        kube = kube_at(server.url, SHORT)
        kube.list_all("Pod", "ns")
        pool_manager = kube.api_client.rest_client.pool_manager
        (pool,) = [pool_manager.pools[key] for key in pool_manager.pools.keys()]
        connection = pool.pool.get_nowait()  # the one just used and put back
    assert connection.sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    if hasattr(socket, "TCP_KEEPIDLE"):
        assert connection.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 15


def stalled_watch_noticed_within(timeouts: ApiTimeouts) -> float:
    """The worst case: the watch connection goes silent right after its headers. Its read
    timeout (the chunk plus slack) ends it, and the watch resumes after the reconnect delay."""
    return timeouts.watch_chunk_s + timeouts.watch_read_slack_s + WATCH_RECONNECT_DELAY_S


def test_with_the_default_timeouts_a_lost_worker_is_noticed_within_10s_on_a_stalled_watch():
    assert stalled_watch_noticed_within(ApiTimeouts()) + REQUEST_SLACK_S < NOTICE_WITHIN_S


def test_a_lost_worker_is_noticed_within_the_watch_read_timeout_when_the_connection_stalls(caplog):
    """The watch connection goes silent right after its headers, and the worker is
    deleted at once. Short timeouts: the default ones only scale the bound (above)."""
    caplog.set_level(logging.INFO, logger="distributetrain.kube.client")
    deleted_at = []

    def delete_when_stalled(server):
        wait_until(lambda: server.stalled, server.changes, 30, "the job's pods watched, the watch gone silent")
        deleted_at.append(time.monotonic())
        server.delete("j-worker-0")

    with FakeApiServer(job_pods()) as server:
        server.stall_watches = 1
        threading.Thread(target=delete_when_stalled, args=(server,), daemon=True).start()
        result = waits.watch_until(kube_at(server.url, SHORT), "ns", SELECTOR, chief_finished(),
                                   time.monotonic() + 30, RealClock())
        noticed_after = time.monotonic() - deleted_at[0]
    assert result.outcome == podwaits.PodLost("j-worker-0", "was deleted")
    assert noticed_after < stalled_watch_noticed_within(SHORT) + REQUEST_SLACK_S
    # Resumed from the same version on a new connection, not relisted; one INFO line says so.
    first, resumed = server.watch_requests
    assert resumed["resourceVersion"] == first["resourceVersion"] and server.list_requests == 1
    assert len(set(server.client_ports[1:])) == 2  # the stalled connection is dropped, not reused
    (broke,) = [r.getMessage() for r in caplog.records if " broke " in r.getMessage()]
    assert broke.startswith(f"watch of pods [ns] {SELECTOR} broke (")
    assert broke.endswith(f"reconnecting from resourceVersion {first['resourceVersion']}")


def test_an_idle_watch_is_renewed_by_short_requests_without_a_stall(caplog):
    caplog.set_level(logging.DEBUG, logger="distributetrain.kube.client")
    with FakeApiServer(job_pods()) as server:
        started = time.monotonic()
        # Two requests: one of a whole chunk, one for the half chunk left.
        events = list(kube_at(server.url, SHORT).watch("Pod", "ns", "3", 1.5, label_selector=SELECTOR))
        elapsed = time.monotonic() - started
    assert {kind for kind, _ in events} == {"BOOKMARK"}
    assert len(server.watch_requests) >= 2
    assert {query["timeoutSeconds"] for query in server.watch_requests} == {"1"}
    assert len(set(server.client_ports)) == 1  # each renewal reuses the kept-alive connection
    assert 1.5 <= elapsed < 1.5 + SHORT.watch_chunk_s + 1.5  # the last request may start just before 1.5 s
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "broke" in m]
    assert messages.count(f"watching pods [ns] {SELECTOR} from resourceVersion 3") == len(server.watch_requests)


@pytest.mark.parametrize("code", [410, 500])
def test_a_watch_error_event_lists_again_and_the_job_goes_on(code):
    def delete_once_listed_again(server):
        wait_until(lambda: server.list_requests == 2, server.changes, 10, "the pods listed again")
        server.delete("j-worker-0")

    with FakeApiServer(job_pods()) as server:
        server.error_watches = [code]
        threading.Thread(target=delete_once_listed_again, args=(server,), daemon=True).start()
        result = waits.watch_until(kube_at(server.url, SHORT), "ns", SELECTOR, chief_finished(),
                                   time.monotonic() + 10, RealClock())
    assert result.outcome == podwaits.PodLost("j-worker-0", "was deleted")
    assert server.list_requests == 2


def test_deletes_patches_and_reads_reuse_one_connection():
    """A response left unread kept its connection from the pool: every delete and every
    annotation opened a new connection (TCP and TLS), 57 of them in one 64-worker teardown."""
    # Every request answered with a small JSON object, as the apiserver answers a delete or a patch.
    with HttpFake(lambda request: Reply(body=pod("p"))) as server:
        kube = kube_at(server.url, SHORT)
        for name in ("a", "b", "c"):
            kube.delete("Pod", "ns", name)
        kube.patch("Pod", "ns", "manager", {"metadata": {"annotations": {"distributetrain.io/phase": "Running"}}})
        kube.read("Namespace", None, "ns")
        kube.delete_all("Pod", "ns", ["d"])
    assert len(server.client_ports) == 6
    assert len(set(server.client_ports)) == 1
