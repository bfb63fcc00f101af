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
from localcluster.probe import ApiProbe

NODE = {"kind": "Node"}


class NodeAnswers:
    """A Node to every request; the reply after ``close_next`` is set closes its connection."""

    close_next = False

    def __call__(self, request) -> Reply:
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
