"""Small, fast requests to the apiserver for readiness waits and cleanup.

`up` polls every 100 ms; importing and configuring the full kubernetes client
would cost more than the polling itself, so the launcher uses plain HTTPS with
the admin client certificate, on a connection each thread keeps: a TLS handshake
per poll (a node's start polls ten times a second, several nodes at once) cost the
apiserver more than the polls themselves.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from localcluster.certs import ADMIN, Pki

APISERVER_HOST = "127.0.0.1"
REQUEST_TIMEOUT_S = 2.0
# A write is asked once, not polled: an apiserver slowed by a loaded host (some 2-5 s a
# request in CI while four tests started nodes and pods at once) is waited for, up to its
# own request timeout (60 s), rather than taken for gone after REQUEST_TIMEOUT_S.
WRITE_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.1


class WaitTimeout(TimeoutError):
    """A readiness wait ran out of time; the message says what was awaited."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


class ApiProbe:
    """Requests to the apiserver as the admin."""

    def __init__(self, pki: Pki, port: int):
        self._port = port
        self._context = ssl.create_default_context(cafile=str(pki.ca_cert))
        self._context.load_cert_chain(str(pki.cert(ADMIN.name)), str(pki.key(ADMIN.name)))
        self._kept = threading.local()

    def get(self, path: str) -> Response | None:
        """The response, or None when the apiserver cannot be reached."""
        return self._request("GET", path)

    def delete(self, path: str) -> Response | None:
        return self._request("DELETE", path, timeout_s=WRITE_TIMEOUT_S)

    def json_patch(self, path: str, operations: list[dict]) -> Response | None:
        """An RFC 6902 JSON patch (e.g. of a Node's status subresource)."""
        return self._request("PATCH", path, json.dumps(operations).encode(), "application/json-patch+json",
                             timeout_s=WRITE_TIMEOUT_S)

    def _request(self, method: str, path: str, body: bytes | None = None, content_type: str | None = None,
                 timeout_s: float = REQUEST_TIMEOUT_S) -> Response | None:
        headers = {"Content-Type": content_type} if content_type else {}
        kept = getattr(self._kept, "connection", None)
        # A kept connection the apiserver has since closed (idle, restarted) fails at once:
        # the request is tried once more on a new one.
        for connection in ([kept] if kept else []) + [None]:
            connection = connection or http.client.HTTPSConnection(APISERVER_HOST, self._port, context=self._context)
            connection.timeout = timeout_s  # this request's, on a connection kept or new
            if connection.sock is not None:
                connection.sock.settimeout(timeout_s)
            try:
                connection.request(method, path, body=body, headers=headers)
                reply = connection.getresponse()
                response = Response(reply.status, reply.read())
            except (OSError, http.client.HTTPException):
                connection.close()
                self._kept.connection = None
                continue
            self._kept.connection = connection
            return response
        return None

    def ready(self) -> bool:
        response = self.get("/readyz")
        return response is not None and response.status == 200

    def exists(self, path: str) -> bool:
        response = self.get(path)
        return response is not None and response.status == 200

    def node_ready(self, name: str) -> bool:
        node = self.node(name)
        conditions = (node or {}).get("status", {}).get("conditions", [])
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def node(self, name: str) -> dict | None:
        """The Node object, None if it does not exist or cannot be read."""
        response = self.get(f"/api/v1/nodes/{name}")
        return response.json() if response is not None and response.status == 200 else None


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `condition` every POLL_INTERVAL_S until true; WaitTimeout after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(POLL_INTERVAL_S)
