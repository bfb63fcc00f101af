"""The kubelet API's log endpoint, served over TLS on each node's own address.

`kubectl logs` goes to the apiserver, which connects to the node's InternalIP
at the kubelet port and asks for `/containerLogs/{namespace}/{pod}/{container}`.
Each node's listening socket is created by a thread that has entered the
node's network namespace (a socket stays in the namespace it was created in),
so the apiserver reaches every node at its own address, as on a real cluster.
Supported queries: follow, tailLines, timestamps, previous, sinceSeconds,
sinceTime, limitBytes. Exec, attach and port-forward are not served.
"""

from __future__ import annotations

import datetime
import http.server
import logging
import socketserver
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from localcluster.agent.containerlogs import read_log
from localcluster.agent.netns import entered
from localcluster.agent.podworker import PodWorker
from localcluster.agent.settings import NodeSpec

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 64


def since_stamp(query: dict[str, list[str]], now: datetime.datetime) -> str | None:
    """The earliest log timestamp wanted, in the log files' own sortable format."""
    if "sinceSeconds" in query:
        since = now - datetime.timedelta(seconds=int(query["sinceSeconds"][0]))
    elif "sinceTime" in query:
        since = datetime.datetime.fromisoformat(query["sinceTime"][0].replace("Z", "+00:00"))
    else:
        return None
    return since.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return query.get(name, ["false"])[0].lower() in ("true", "1")


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _LogServer
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        url = urlsplit(self.path)
        parts = [unquote(part) for part in url.path.split("/") if part]
        if url.path == "/healthz":
            self._reply(200, b"ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._reply(404, f"{url.path} is not served by the localcluster node agent\n".encode())
            return
        _, namespace, pod_name, container = parts
        worker = self.server.find_pod(namespace, pod_name)
        if worker is None:
            self._reply(404, f'pod "{pod_name}" in namespace "{namespace}" not found\n'.encode())
            return
        query = parse_qs(url.query)
        previous = _flag(query, "previous")
        found = worker.log_file(container, previous)
        if found is None:
            if container not in worker.container_names:
                message = f'container "{container}" in pod "{pod_name}" is not available'
            elif previous:
                message = f'previous terminated container "{container}" in pod "{pod_name}" not found'
            else:
                message = f'container "{container}" in pod "{pod_name}" is waiting to start: ContainerCreating'
            self._reply(400, (message + "\n").encode())
            return
        path, closed = found
        try:
            tail = int(query["tailLines"][0]) if "tailLines" in query else None
            since = since_stamp(query, datetime.datetime.now(datetime.timezone.utc))
        except ValueError as error:
            self._reply(400, f"bad query: {error}\n".encode())
            return
        self._stream(path, closed, tail, since, query)

    def _stream(self, path: Path, closed: threading.Event | None, tail: int | None, since: str | None,
                query: dict[str, list[str]]) -> None:
        limit = int(query["limitBytes"][0]) if "limitBytes" in query else None
        timestamps = _flag(query, "timestamps")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        sent = 0
        try:
            for line in read_log(path, tail, timestamps or since is not None, _flag(query, "follow"), closed):
                if since is not None:
                    stamp, _, text = line.partition(b" ")
                    if stamp.decode() < since:
                        continue
                    if not timestamps:
                        line = text
                if limit is not None and sent + len(line) > limit:
                    self.wfile.write(line[: limit - sent])
                    break
                self.wfile.write(line)
                self.wfile.flush()
                sent += len(line)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        except FileNotFoundError:
            pass

    def _reply(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's signature)
        log.debug("%s %s", self.address_string(), format % args)


class _LogServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """An HTTPS server whose TLS handshakes happen in the request threads."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], context: ssl.SSLContext,
                 find_pod: Callable[[str, str], PodWorker | None]):
        super().__init__(address, _Handler)
        self.context = context
        self.find_pod = find_pod

    def server_bind(self) -> None:
        # HTTPServer would look the address up in DNS, which the node's netns cannot reach.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def finish_request(self, request, client_address) -> None:
        try:
            request = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as error:
            log.debug("TLS handshake with %s failed: %s", client_address, error)
            return
        super().finish_request(request, client_address)


class KubeletServer:
    """The log endpoint of one node."""

    def __init__(self, node: NodeSpec, port: int, cert: Path, key: Path,
                 find_pod: Callable[[str, str], PodWorker | None]):
        self.node = node
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        # The apiserver presents a client certificate; this fake kubelet does not require one.
        context.verify_mode = ssl.CERT_NONE
        with entered(node.netns):
            self._server = _LogServer((node.ip, port), context, find_pod)
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"kubelet-api-{node.name}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("node %s: kubelet API (container logs) on https://%s:%d", self.node.name, self.node.ip,
                 self._server.server_address[1])

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
