"""The one HTTP server of the unit tests: ``HttpFake``, on 127.0.0.1, for black-box tests of
the API layer and of anything else that speaks HTTP (an image registry).

``HttpFake(answer)`` reads each request whole (``received``: every one, in order, with the
client port of its connection; ``connections``: how many were accepted; ``changes``: each
one answered, what a test waits on with ``harness.waiting.wait_until``) and answers what
``answer(request)`` returns, a ``Reply``: a status and a body (JSON, or bytes of any type:
protobuf), or one that misbehaves in ways no cluster test can produce: a body cut half way
and the connection closed (``cut``), a body streamed in chunks as a watch is (``chunks``,
which may go silent with the connection held), an answer that never comes (``SILENT``), a
connection closed with no answer (``CLOSED``).

On it, as API servers:
- ``FakeApiServer`` serves the pods endpoints (list; watch, chunked, with ``timeoutSeconds``
  and bookmarks), and Leases (get, create, update with resourceVersion conflicts, and a
  watch, as the placement lock uses them). ``stall_watches``: that many next watch
  connections send their response headers and the events already due, then go silent with
  the connection held open (a stalled or half-open connection as the client sees it;
  ``stalled`` counts them once silent).
  ``error_watches``: status codes; each next watch sends the events due, then a watch
  ``ERROR`` event with the first code left, and ends. Only what ``distributetrain.kube.client``
  sends is understood; anything else is a 404.
- ``PathServer`` answers GETs of fixed paths with fixed JSON (discovery documents, custom
  objects), a 404 Status for any other path.
- ``PodListServer`` serves the inventory's pod list in protobuf, whole or in pages, as an API
  server of a given version does, with a list that never comes whole (read from etcd), pages
  cut part way and continue tokens expired on demand.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from kubernetes import client

from distributetrain.core.clock import Clock, RealClock
from distributetrain.kube import podwire
from distributetrain.kube.client import Kube
from distributetrain.kube.connection import ApiTimeouts, make_api_client
from harness.podproto import pod_list, status
from harness.waiting import Changes

BOOKMARK_BEFORE_END_S = 0.5  # the real apiserver sends one 2 s before a watch's timeout
SHUTDOWN_POLL_S = 0.02  # how often the server looks for a shutdown: every test waits this long on exit


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]  # the last value of each parameter
    headers: Message
    body: bytes
    client_port: int  # which connection it came on
    client_name: str = ""  # the commonName of the client's TLS certificate, if it sent one

    def json(self) -> dict:
        return json.loads(self.body or b"{}")


@dataclass
class Reply:
    code: int = 200
    body: dict | bytes = b""  # a dict is sent as JSON
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    cut: bool = False  # half the body, then the connection closed
    chunks: Iterable[bytes] | None = None  # a body streamed, each chunk as it comes
    silent: bool = False  # no answer ever, the connection held until the server stops
    closed: bool = False  # the connection closed with no answer
    close: bool = False  # the whole answer, then the connection closed (a server restarting, an idle timeout)


SILENT = Reply(silent=True)
CLOSED = Reply(closed=True)


class HttpFake:
    """HTTP/1.1 with keep-alive on ``host``, a free port, answering ``answer(request)``; HTTPS
    with ``tls`` (a server context holding its certificate)."""

    def __init__(self, answer: Callable[[Request], Reply], host: str = "127.0.0.1", tls: ssl.SSLContext | None = None):
        self.answer = answer
        self.received: list[Request] = []
        self.connections = 0
        self.changes = Changes()  # each request, once ``answer`` has decided its reply
        self.closing = threading.Event()  # set when the server stops: held connections let go
        self._server = ThreadingHTTPServer((host, 0), self._handler())
        self._server.daemon_threads = True
        self._scheme = "http" if tls is None else "https"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_port

    @property
    def url(self) -> str:
        return f"{self._scheme}://{self._server.server_address[0]}:{self.port}"

    @property
    def client_ports(self) -> list[int]:
        return [request.client_port for request in self.received]

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are two writes: with Nagle's algorithm the body waits for the
            # client's delayed ACK of the headers, 40 ms a response (Go's servers set it too).
            disable_nagle_algorithm = True

            def setup(self):
                super().setup()
                fake.connections += 1

            def log_message(self, *args):
                pass

            def _serve(self):
                url = urlparse(self.path)
                peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
                request = Request(self.command, url.path, {k: v[-1] for k, v in parse_qs(url.query).items()},
                                  self.headers, self.rfile.read(int(self.headers.get("Content-Length") or 0)),
                                  self.client_address[1],
                                  dict(pair[0] for pair in (peer or {}).get("subject", ())).get("commonName", ""))
                fake.received.append(request)
                try:
                    reply = fake.answer(request)
                    fake.changes.note()
                    fake._reply(self, reply)
                except OSError:
                    self.close_connection = True  # the client went away

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        return Handler

    def _reply(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.silent:
            self.closing.wait()
        if reply.silent or reply.closed:
            handler.close_connection = True
            return
        body = json.dumps(reply.body).encode() if isinstance(reply.body, dict) else reply.body
        handler.send_response(reply.code)
        handler.send_header("Content-Type", reply.content_type)
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        if reply.chunks is not None:
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            for chunk in reply.chunks:
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
            return
        handler.send_header("Content-Length", str(len(body)))
        if reply.close:
            handler.send_header("Connection", "close")
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body[:len(body) // 2] if reply.cut else body)
        handler.close_connection = reply.cut or reply.close


class FakeApiServer(HttpFake):
    def __init__(self, pods: list[dict] = ()):
        super().__init__(self._route)
        self._lock = threading.Condition()
        self._version = 1
        self._pods: dict[str, dict] = {}
        self._events: list[tuple[int, str, dict]] = []  # (resourceVersion, type, pod)
        self._lease_events: list[tuple[int, str, dict]] = []  # (resourceVersion, type, Lease)
        self.stall_watches = 0
        self.stalled = 0  # watches gone silent so far (each one of ``changes``)
        self.error_watches: list[int] = []  # status codes of the ERROR events still to send
        self.watch_requests: list[dict[str, str]] = []  # query of every watch, in order
        self.list_requests = 0
        self.leases: dict[tuple[str, str], dict] = {}  # (namespace, name) -> Lease
        self.lease_writes: list[dict] = []  # spec of every Lease created or updated, in order
        self.lease_reads = 0
        self.lease_conflicts = 0  # writes refused: based on an older resourceVersion
        for p in pods:
            self._store("ADDED", p)

    def __exit__(self, *exc) -> None:
        self.closing.set()
        with self._lock:
            self._lock.notify_all()
        super().__exit__(*exc)

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

    def put_lease(self, *leases: dict) -> None:
        """Store a Lease as another client would write it: a new resourceVersion. Several:
        written one after the other at once, so a write based on any but the last conflicts."""
        with self._lock:
            for lease in leases:
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
                self.lease_reads += 1
                return (200, current) if current else (404, _status(404, "NotFound", f"lease {name} not found"))
            if method == "POST" and current:
                return 409, _status(409, "AlreadyExists", f"lease {name} already exists")
            if method == "PUT" and not current:
                return 404, _status(404, "NotFound", f"lease {name} not found")
            if method == "PUT" and body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                self.lease_conflicts += 1
                return 409, _status(409, "Conflict", f"the object has been modified: lease {name}")
            self._version += 1
            body["metadata"].update(namespace=namespace, resourceVersion=str(self._version))
            self.leases[key] = body
            self.lease_writes.append(json.loads(json.dumps(body["spec"])))
            self._lease_events.append((self._version, "ADDED" if method == "POST" else "MODIFIED", body))
            self._lock.notify_all()
            return (201 if method == "POST" else 200), body

    # -- serving -----------------------------------------------------------------------
    def _route(self, request: Request) -> Reply:
        watch = request.query.get("watch", "").lower() == "true"
        if "/leases" in request.path and watch:
            return self._watch(request.query, self._lease_events)
        if "/leases" in request.path and request.method in ("GET", "POST", "PUT"):
            code, body = self._lease_request(request.method, request.path,
                                             request.json() if request.method != "GET" else None)
            return Reply(code, body)
        if request.method != "GET" or not request.path.endswith("/pods"):
            return Reply(404, _status(404, "NotFound", "not here"))
        if watch:
            return self._watch(request.query, self._events)
        with self._lock:
            self.list_requests += 1
            return Reply(200, {"kind": "PodList", "metadata": {"resourceVersion": str(self._version)},
                               "items": list(self._pods.values())})

    def _watch(self, query: dict[str, str], events: list[tuple[int, str, dict]]) -> Reply:
        with self._lock:
            self.watch_requests.append(query)
            stall = self.stall_watches > 0
            self.stall_watches -= stall
            error = self.error_watches.pop(0) if self.error_watches else None
        return Reply(chunks=(json.dumps(event).encode() + b"\n" for event in self._watch_events(
            query, events, stall, error)))

    def _watch_events(self, query: dict[str, str], events: list[tuple[int, str, dict]], stall: bool,
                      error: int | None) -> Iterable[dict]:
        since = int(query.get("resourceVersion") or 0)
        ends_at = time.monotonic() + int(query.get("timeoutSeconds", "1800"))
        bookmark_sent = False
        while not self.closing.is_set():
            with self._lock:
                due = [(v, kind, obj) for v, kind, obj in events if v > since]
                if not due and not stall and error is None:
                    self._lock.wait(timeout=0.05)
                    due = [(v, kind, obj) for v, kind, obj in events if v > since]
                version = self._version
            for v, kind, obj in due:
                yield {"type": kind, "object": obj}
                since = v
            if error is not None:
                yield {"type": "ERROR", "object": {"kind": "Status", "status": "Failure", "code": error,
                                                   "reason": "InternalError", "message": f"watch failed ({error})"}}
                return
            if stall:
                with self._lock:
                    self.stalled += 1
                self.changes.note()
                self.closing.wait()  # silent from now on, the connection held open
                return
            now = time.monotonic()
            if now >= ends_at:
                return
            if not bookmark_sent and ends_at - now <= BOOKMARK_BEFORE_END_S:
                yield {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": str(version)}}}
                bookmark_sent = True


class PathServer(HttpFake):
    """GETs of ``answers``' paths answered with their JSON; any other path a 404 Status, as
    the API server answers a path it does not serve. ``paths``: every path asked, in order."""

    def __init__(self, answers: dict[str, dict]):
        super().__init__(self._route)
        self.answers = answers

    @property
    def paths(self) -> list[str]:
        return [request.path for request in self.received]

    def _route(self, request: Request) -> Reply:
        found = self.answers.get(request.path)
        if found is None:
            return Reply(404, _status(404, "NotFound", "the server could not find the requested resource"))
        return Reply(200, found)


class PodListServer(HttpFake):
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
        super().__init__(self._route)
        self.pods, self.git_version, self.version = pods, git_version, version
        self.silent_whole, self.cuts, self.expired = silent_whole, cuts, list(expired)
        self.requests: list[dict[str, str]] = []  # the query of each pod list request, in order

    def _route(self, request: Request) -> Reply:
        if request.path == "/version":
            return Reply(200, {"gitVersion": self.git_version})
        self.requests.append(request.query)
        if "limit" not in request.query and self.silent_whole:
            return SILENT
        code, body = self._answer(request.query)
        return Reply(code, body, podwire.PROTOBUF, cut=len(self.requests) in self.cuts)

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
