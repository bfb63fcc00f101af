"""The launcher's requests to the apiserver (localcluster/localcluster/probe.py): one kept
TLS connection per thread however often it polls, and a new one when the server has
closed it, against the tests' HTTP fake serving TLS with the cluster's certificates and
asking for a client certificate, as the apiserver does."""

import socket
import ssl
import threading

import pytest

from harness.apiserver import HttpFake, Reply
from localcluster import certs
from localcluster.certs import ADMIN
from localcluster.probe import REQUEST_TIMEOUT_S, ApiProbe

NODE = {"kind": "Node"}


class NodeAnswers:
    """A Node to every request; the reply after ``close_next`` is set closes its connection.
    Once ``hold`` is called, no reply comes until ``release`` (a loaded apiserver)."""

    close_next = False
    BROKEN_TEST_S = 30

    def __init__(self):
        self.released = threading.Event()
        self.released.set()
        self.arrived = {"GET": threading.Event(), "PATCH": threading.Event(), "DELETE": threading.Event()}

    def hold(self) -> None:
        self.released.clear()

    def release(self) -> None:
        self.released.set()

    def __call__(self, request) -> Reply:
        self.arrived[request.method].set()
        self.released.wait(self.BROKEN_TEST_S)
        close, self.close_next = self.close_next, False
        return Reply(body=NODE, close=close)


def apiserver_tls(pki: certs.Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_cert))
    context.load_cert_chain(str(pki.cert("apiserver")), str(pki.key("apiserver")))
    context.verify_mode = ssl.CERT_REQUIRED
    return context


@pytest.fixture
def served(tmp_path):
    answers = NodeAnswers()
    with HttpFake(answers, tls=apiserver_tls(certs.ensure_pki(tmp_path / "pki"))) as server:
        yield server, answers


def test_polls_share_one_connection_and_a_closed_one_is_replaced(served, tmp_path):
    server, answers = served
    probe = ApiProbe(certs.Pki(tmp_path / "pki"), server.port)
    assert [probe.node("a") for _ in range(20)] == [NODE] * 20
    assert server.connections == 1
    answers.close_next = True
    assert probe.node("a") == NODE  # the reply that closes it
    assert probe.node("a") == NODE  # on a new connection, not None
    assert server.connections == 2
    assert {request.client_name for request in server.received} == {ADMIN.user}


def test_each_thread_keeps_its_own_connection(served, tmp_path):
    server, _ = served
    probe = ApiProbe(certs.Pki(tmp_path / "pki"), server.port)
    replies = []

    def poll():
        replies.extend(probe.node("a") for _ in range(5))

    threads = [threading.Thread(target=poll) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert replies == [NODE] * 15
    assert server.connections == 3


def test_no_server_is_none_not_an_error(tmp_path):
    with socket.socket() as unused:  # a port nothing listens on once closed
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    assert ApiProbe(certs.ensure_pki(tmp_path / "pki"), port).node("a") is None


def test_a_write_waits_for_a_slow_apiserver_and_a_poll_does_not(served, tmp_path):
    """A node's start writes its GPUs once; CI's apiserver, slowed by a loaded host, answered
    after the polls' timeout, and the node failed with "no answer". Here the write is held
    for as long as three polls sent after it take to give up."""
    server, answers = served
    probe = ApiProbe(certs.Pki(tmp_path / "pki"), server.port)
    written = {}
    connected, go = threading.Event(), threading.Event()

    def write(method: str) -> None:
        assert probe.node("a") == NODE  # a kept connection, as a node's start has by then
        connected.set()
        go.wait(answers.BROKEN_TEST_S)
        if method == "PATCH":
            written[method] = probe.json_patch("/api/v1/nodes/a/status",
                                               [{"op": "add", "path": "/status/capacity/x", "value": "1"}])
        else:
            written[method] = probe.delete("/api/v1/nodes/a")

    for method in ("PATCH", "DELETE"):
        connected.clear(), go.clear()
        writer = threading.Thread(target=write, args=(method,))
        writer.start()
        assert connected.wait(answers.BROKEN_TEST_S)
        answers.hold()
        go.set()
        assert answers.arrived[method].wait(answers.BROKEN_TEST_S)
        # Polls sent after it give up, each after REQUEST_TIMEOUT_S, and their wait asks again:
        # three of them, longer than a write tried twice on the polls' timeout waited.
        assert [probe.node("a") for _ in range(3)] == [None] * 3
        answers.release()
        writer.join(answers.BROKEN_TEST_S)
        assert written[method] is not None and written[method].status == 200, method
