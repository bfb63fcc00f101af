"""The job's workers, served by the manager to its chief over HTTP.

The chief is created with the workers, so it holds its GPUs from the start, and it asks
here for the hosts to train on: the manager answers once every worker of the attempt is
Ready (503 until then), and the chief puts itself first. An elastic chief asks every
second (``horovodrun --host-discovery-script``) and Horovod reshapes the job when the
answer changes. mpi-operator writes that answer into a ConfigMap, which a kubelet
refreshes in the pod only every 60-90 s; here the manager answers from its own memory,
so a lost or added worker is seen within about a second of the manager seeing it. The
answer is Horovod's format: one ``address:slots`` line per worker, in rank order.

The list is not secret (pod addresses and GPU counts) and is read-only; the server
answers GET /hosts and nothing else. On an IPv6 pod network an address holds colons
itself: the slots are what follows the last one, and the chief names such hosts for
Horovod, which splits on every colon (``podscripts/discover.py``).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from distributetrain.core import names

log = logging.getLogger(__name__)

DISCOVERY_PORT = names.DISCOVERY_PORT
HOSTS_PATH = "/hosts"
# How often the server looks for a shutdown between requests: the manager waits this
# long for it on every exit (socketserver's default, 0.5 s, showed in every phase).
SHUTDOWN_POLL_S = 0.05
# A request being answered when the manager's process ends (pre-training ends just after
# it publishes the hosts, as the chief asks for them) is answered whole first: the exit
# waits for it, at most this long for a client that stalls mid-request.
REQUEST_TIMEOUT_S = 2.0


def hosts_url(manager_address: str) -> str:
    """Where the chief asks the manager for its hosts; an IPv6 address in brackets (RFC 3986)."""
    host = f"[{manager_address}]" if ":" in manager_address else manager_address
    return f"http://{host}:{DISCOVERY_PORT}{HOSTS_PATH}"


def hosts_text(hosts: list[tuple[str, int]]) -> str:
    """Horovod's discovery format, in the given order."""
    return "".join(f"{address}:{slots}\n" for address, slots in hosts)


class HostList:
    """The current workers, replaced whole; read by the server's threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._text: str | None = None  # nothing published: the server answers 503

    def publish(self, hosts: Sequence[tuple[str, int]] | None) -> bool:
        """Replace the list (None: nothing to train on yet); True if it changed."""
        text = None if hosts is None else hosts_text(hosts)
        with self._lock:
            changed, self._text = text != self._text, text
        return changed

    def text(self) -> str | None:
        with self._lock:
            return self._text


class _DualStackServer(ThreadingHTTPServer):
    """Listens on IPv6 and IPv4 alike: the manager's pod address may be either."""

    address_family = socket.AF_INET6

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def _ipv6_available() -> bool:
    """False on a kernel booted without IPv6 (ipv6.disable=1), where only IPv4 listens."""
    try:
        socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close()
    except OSError:
        return False
    return True


def _server_class(address: str) -> type[ThreadingHTTPServer]:
    if address:
        return _DualStackServer if ":" in address else ThreadingHTTPServer
    return _DualStackServer if _ipv6_available() else ThreadingHTTPServer


class DiscoveryServer:
    """``HostList`` over HTTP on ``port`` (0: any free port), in a daemon thread; a context manager.
    ``address`` "" listens on every address, IPv6 and IPv4."""

    def __init__(self, hosts: HostList, port: int = DISCOVERY_PORT, address: str = ""):
        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_TIMEOUT_S

            def do_GET(self):  # noqa: N802 (the http.server interface)
                if self.path != HOSTS_PATH:
                    self.send_error(404)
                    return
                text = hosts.text()
                if text is None:  # nothing published yet: the chief asks again
                    self.send_error(503)
                    return
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format, *args):  # one request a second: not worth a log line
                pass

        self._server = _server_class(address)((address, port), Handler)
        # Not daemon threads, which the process's end would cut mid-answer: server_close joins them.
        self._server.daemon_threads = False
        self._thread = threading.Thread(target=self._server.serve_forever, args=(SHUTDOWN_POLL_S,), name="discovery",
                                        daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def __enter__(self) -> DiscoveryServer:
        self._thread.start()
        log.info("serving the job's hosts on port %d%s", self.port, HOSTS_PATH)
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
