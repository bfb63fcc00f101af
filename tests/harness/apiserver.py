"""Stand-ins for the apiserver on 127.0.0.1, for black-box tests of the API layer.

``FakeApiServer`` serves the pods endpoints (list; watch, chunked, with ``timeoutSeconds``
and bookmarks), and Leases (get, create, update with resourceVersion conflicts, and a
watch, as the placement lock uses them). It misbehaves on demand in ways no cluster test can produce:

- ``stall_watches``: that many next watch connections send their response headers and
  the events already due, then go silent with the connection held open (a stalled or
  half-open connection as the client sees it).
- ``error_watches``: status codes; each next watch sends the events due, then a watch
  ``ERROR`` event with the first code left, and ends.

Only what ``distributetrain.kube.client`` sends is understood; anything else is a 404.
``PathServer`` answers GETs of fixed paths with fixed JSON (discovery documents, custom
objects), a 404 Status for any other path. ``PodListServer`` serves the inventory's pod
list in protobuf, whole or in pages, as an API server of a given version does, with a
list that never comes whole (read from etcd), pages cut part way and continue tokens
expired on demand. ``RudeServer`` is a TCP server that accepts connections and never
answers, or closes them.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from kubernetes import client

from distributetrain.core.clock import Clock, RealClock
from distributetrain.kube import podwire
from distributetrain.kube.client import Kube
from distributetrain.kube.connection import ApiTimeouts, make_api_client
from harness.podproto import pod_list, status

BOOKMARK_BEFORE_END_S = 0.5  # the real apiserver sends one 2 s before a watch's timeout
SHUTDOWN_POLL_S = 0.02  # how often the server looks for a shutdown: every test waits this long on exit


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}


class FakeApiServer:
    def __init__(self, pods: list[dict] = ()):
        self._lock = threading.Condition()
        self._version = 1
        self._pods: dict[str, dict] = {}
        self._events: list[tuple[int, str, dict]] = []  # (resourceVersion, type, pod)
        self._lease_events: list[tuple[int, str, dict]] = []  # (resourceVersion, type, Lease)
        self.stall_watches = 0
        self.error_watches: list[int] = []  # status codes of the ERROR events still to send
        self.watch_requests: list[dict[str, str]] = []  # query of every watch, in order
        self.list_requests = 0
        self.client_ports: list[int] = []  # of every request, in order: which connection it came on
        self.leases: dict[tuple[str, str], dict] = {}  # (namespace, name) -> Lease
        self.lease_writes: list[dict] = []  # spec of every Lease created or updated, in order
        self._closing = threading.Event()
        for p in pods:
            self._store("ADDED", p)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> "FakeApiServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._closing.set()
        with self._lock:
            self._lock.notify_all()
        self._server.shutdown()
        self._server.server_close()

    # -- changing the cluster ----------------------------------------------------------
    def _store(self, kind: str, obj: dict) -> None:
        self._version += 1
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(self._version)
        if kind == "DELETED":
            self._pods.pop(obj["metadata"]["name"], None)
        else:
            self._pods[obj["metadata"]["name"]] = obj
        self._events.append((self._version, kind, obj))

    def delete(self, name: str) -> None:
        with self._lock:
            self._store("DELETED", self._pods[name])
            self._lock.notify_all()

    def put(self, obj: dict) -> None:
        with self._lock:
            self._store("MODIFIED" if obj["metadata"]["name"] in self._pods else "ADDED", obj)
            self._lock.notify_all()

    def put_lease(self, lease: dict) -> None:
        """Store a Lease as another client would write it: a new resourceVersion."""
        with self._lock:
            self._version += 1
            lease = json.loads(json.dumps(lease))
            lease["metadata"]["resourceVersion"] = str(self._version)
            self.leases[(lease["metadata"]["namespace"], lease["metadata"]["name"])] = lease
            self._lease_events.append((self._version, "MODIFIED", lease))
            self._lock.notify_all()

    def lease(self, namespace: str, name: str) -> dict | None:
        with self._lock:
            return json.loads(json.dumps(self.leases.get((namespace, name))))

    def _lease_request(self, method: str, path: str, body: dict | None) -> tuple[int, dict]:
        """(status, body) for /apis/coordination.k8s.io/v1/namespaces/NS/leases[/NAME]."""
        parts = path.strip("/").split("/")
        namespace, name = parts[4], (parts[6] if len(parts) > 6 else body["metadata"]["name"])
        key = (namespace, name)
        with self._lock:
            current = self.leases.get(key)
            if method == "GET":
                return (200, current) if current else (404, _status(404, "NotFound", f"lease {name} not found"))
            if method == "POST" and current:
                return 409, _status(409, "AlreadyExists", f"lease {name} already exists")
            if method == "PUT" and not current:
                return 404, _status(404, "NotFound", f"lease {name} not found")
            if method == "PUT" and body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", f"the object has been modified: lease {name}")
            self._version += 1
            body["metadata"].update(namespace=namespace, resourceVersion=str(self._version))
            self.leases[key] = body
            self.lease_writes.append(json.loads(json.dumps(body["spec"])))
            self._lease_events.append((self._version, "ADDED" if method == "POST" else "MODIFIED", body))
            self._lock.notify_all()
            return (201 if method == "POST" else 200), body

    # -- serving -----------------------------------------------------------------------
    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are two writes: with Nagle's algorithm the body waits for the
            # client's delayed ACK of the headers, 40 ms a response (Go's servers set it too).
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_GET(self):
                url = urlparse(self.path)
                fake.client_ports.append(self.client_address[1])
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                if "/leases" in url.path and query.get("watch", "").lower() == "true":
                    fake._watch(self, query, fake._lease_events)
                elif "/leases" in url.path:
                    self._json(*fake._lease_request("GET", url.path, None))
                elif not url.path.endswith("/pods"):
                    self._json(404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not here"})
                elif query.get("watch", "").lower() == "true":
                    fake._watch(self, query, fake._events)
                else:
                    fake._list(self)

            def do_POST(self):
                self._write("POST")

            def do_PUT(self):
                self._write("PUT")

            def _write(self, method: str) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                url = urlparse(self.path)
                fake.client_ports.append(self.client_address[1])
                if "/leases" in url.path:
                    self._json(*fake._lease_request(method, url.path, body))
                else:
                    self._json(404, _status(404, "NotFound", "not here"))

            def _json(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def _list(self, handler) -> None:
        with self._lock:
            self.list_requests += 1
            body = {"kind": "PodList", "metadata": {"resourceVersion": str(self._version)},
                    "items": list(self._pods.values())}
        handler._json(200, body)

    def _watch(self, handler, query: dict[str, str], events: list[tuple[int, str, dict]]) -> None:
        with self._lock:
            self.watch_requests.append(query)
            stall = self.stall_watches > 0
            self.stall_watches -= stall
            error = self.error_watches.pop(0) if self.error_watches else None
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        since = int(query.get("resourceVersion") or 0)
        ends_at = time.monotonic() + int(query.get("timeoutSeconds", "1800"))
        bookmark_sent = False
        try:
            while not self._closing.is_set():
                with self._lock:
                    due = [(v, kind, obj) for v, kind, obj in events if v > since]
                    if not due and not stall and error is None:
                        self._lock.wait(timeout=0.05)
                        due = [(v, kind, obj) for v, kind, obj in events if v > since]
                    version = self._version
                for v, kind, obj in due:
                    self._send(handler, {"type": kind, "object": obj})
                    since = v
                if error is not None:
                    self._send(handler, {"type": "ERROR", "object": {
                        "kind": "Status", "status": "Failure", "code": error, "reason": "InternalError",
                        "message": f"watch failed ({error})"}})
                    break
                if stall:
                    self._closing.wait()  # silent from now on, the connection held open
                    return
                now = time.monotonic()
                if now >= ends_at:
                    break
                if not bookmark_sent and ends_at - now <= BOOKMARK_BEFORE_END_S:
                    self._send(handler, {"type": "BOOKMARK", "object": {
                        "kind": "Pod", "metadata": {"resourceVersion": str(version)}}})
                    bookmark_sent = True
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except OSError:
            pass  # the client went away

    @staticmethod
    def _send(handler, event: dict) -> None:
        line = json.dumps(event).encode() + b"\n"
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        handler.wfile.flush()


class PathServer(ThreadingHTTPServer):
    """GETs of ``answers``' paths answered with their JSON; any other path a 404 Status, as
    the API server answers a path it does not serve. ``paths``: every path asked, in order."""

    def __init__(self, answers: dict[str, dict]):
        self.answers = answers
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(handler) -> None:
                path = urlparse(handler.path).path
                server.paths.append(path)
                found = server.answers.get(path)
                body = json.dumps(found if found is not None else _status(
                    404, "NotFound", "the server could not find the requested resource")).encode()
                handler.send_response(200 if found is not None else 404)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)

            def log_message(handler, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def __enter__(self) -> "PathServer":
        threading.Thread(target=self.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


class PodListServer(ThreadingHTTPServer):
    """``/version`` and the pod list of ``pods`` in protobuf, all of it one snapshot
    (resourceVersion ``version``): whole without ``limit``, else ``limit`` pods from the
    continue token's and the next token. On demand:

    - ``silent_whole``: an unpaginated list answers nothing, as a server reading every pod
      of a large cluster from etcd (1.30, or its watch cache off), past any read timeout;
    - ``cuts``: the numbers (from 1) of pod list requests whose answer stops half way;
    - ``expired``: continue tokens answered once with 410 Gone, in protobuf, as etcd's
      compaction of the list's revision makes them.
    """

    def __init__(self, pods: list[dict], git_version: str = "v1.34.10", version: str = "77",
                 silent_whole: bool = False, cuts: tuple[int, ...] = (), expired: tuple[str, ...] = ()):
        self.pods, self.git_version, self.version = pods, git_version, version
        self.silent_whole, self.cuts, self.expired = silent_whole, cuts, list(expired)
        self.requests: list[dict[str, str]] = []  # the query of each pod list request, in order
        self.closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(handler) -> None:
                url = urlparse(handler.path)
                if url.path == "/version":
                    return server._send(handler, 200, "application/json",
                                        json.dumps({"gitVersion": server.git_version}).encode())
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                server.requests.append(query)
                number = len(server.requests)
                if "limit" not in query and server.silent_whole:
                    server.closing.wait()  # held, silent, until the test ends
                    return None
                code, body = server._answer(query)
                return server._send(handler, code, podwire.PROTOBUF, body, cut=number in server.cuts)

            def log_message(handler, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.daemon_threads = True

    def _answer(self, query: dict[str, str]) -> tuple[int, bytes]:
        if "limit" not in query:
            return 200, pod_list(self.pods, self.version)
        token = query.get("continue", "")
        if token in self.expired:
            self.expired.remove(token)
            return 410, status({"metadata": {}, "status": "Failure", "reason": "Expired", "code": 410,
                                "message": "The provided continue parameter is too old to display a consistent "
                                           "list result."})
        start, limit = int(token or 0), int(query["limit"])
        following = str(start + limit) if start + limit < len(self.pods) else ""
        return 200, pod_list(self.pods[start:start + limit], self.version, following)

    @staticmethod
    def _send(handler, code: int, content_type: str, body: bytes, cut: bool = False) -> None:
        handler.send_response(code)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body[:len(body) // 2] if cut else body)
        handler.close_connection = cut

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def __enter__(self) -> "PodListServer":
        threading.Thread(target=self.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()


class RudeServer:
    """A TCP server on 127.0.0.1 that accepts every connection and then either never
    answers (``"silent"``: the connection stays open) or closes it at once (``"close"``)."""

    def __init__(self, behaviour: str):
        assert behaviour in ("silent", "close"), behaviour
        self.behaviour = behaviour
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> "RudeServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._listener.close()
        for connection in self._held:
            connection.close()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            if self.behaviour == "silent":
                self._held.append(connection)
            else:
                connection.close()


def kube_at(url: str, timeouts: ApiTimeouts, clock: Clock | None = None) -> Kube:
    """The project's API layer, as the manager builds it, talking to ``url`` (a fake server's);
    its retries on ``clock`` (None: real time, for tests of real sockets' timeouts)."""
    configuration = client.Configuration()
    configuration.host = url
    return Kube(make_api_client(configuration, timeouts), clock or RealClock(), timeouts)


def kubeconfig(path, server_url: str) -> str:
    """A kubeconfig file naming ``server_url``; returns its path."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{server_url}'}}}}]\n"
        "users: [{name: fake, user: {token: fake}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: ns}}]\n"
    )
    return str(path)
