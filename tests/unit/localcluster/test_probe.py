"""The launcher's requests to the apiserver (localcluster/localcluster/probe.py): one kept
TLS connection per thread however often it polls, and a new one when the server has
closed it, against a real TLS server with the cluster's certificates."""

import http.server
import ssl
import threading

import pytest

from localcluster import certs
from localcluster.certs import ADMIN
from localcluster.probe import ApiProbe


class CountingServer(http.server.ThreadingHTTPServer):
    """HTTPS with the apiserver's certificate, asking for a client certificate as the
    apiserver does; counts the TLS connections it accepts. It closes a connection after a
    reply when `close_next` is set, as an apiserver restart or an idle timeout would."""

    def __init__(self, pki):
        super().__init__(("127.0.0.1", 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_cert))
        context.load_cert_chain(str(pki.cert("apiserver")), str(pki.key("apiserver")))
        context.verify_mode = ssl.CERT_REQUIRED
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self.connections = 0
        self.close_next = False
        self.users: list[str] = []


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.server.connections += 1

    def do_GET(self):  # noqa: N802 - http.server's name
        subject = dict(pair[0] for pair in self.connection.getpeercert()["subject"])
        self.server.users.append(subject["commonName"])
        body = b'{"kind": "Node"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if self.server.close_next:
            self.server.close_next = False
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    running = CountingServer(certs.ensure_pki(tmp_path / "pki"))
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    yield running
    running.shutdown()
    running.server_close()


def test_polls_share_one_connection_and_a_closed_one_is_replaced(server, tmp_path):
    probe = ApiProbe(certs.Pki(tmp_path / "pki"), server.server_address[1])
    assert [probe.node("a") for _ in range(20)] == [{"kind": "Node"}] * 20
    assert server.connections == 1
    server.close_next = True
    assert probe.node("a") == {"kind": "Node"}  # the reply that closes it
    assert probe.node("a") == {"kind": "Node"}  # on a new connection, not None
    assert server.connections == 2
    assert set(server.users) == {ADMIN.user}


def test_each_thread_keeps_its_own_connection(server, tmp_path):
    probe = ApiProbe(certs.Pki(tmp_path / "pki"), server.server_address[1])
    replies = []

    def poll():
        replies.extend(probe.node("a") for _ in range(5))

    threads = [threading.Thread(target=poll) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert replies == [{"kind": "Node"}] * 15
    assert server.connections == 3


def test_no_server_is_none_not_an_error(tmp_path):
    unused = CountingServer(certs.ensure_pki(tmp_path / "pki"))
    port = unused.server_address[1]
    unused.server_close()
    assert ApiProbe(certs.Pki(tmp_path / "pki"), port).node("a") is None
