"""The agent's only door to the apiserver: plain JSON dicts over the official client.

The agent reads and writes pods, nodes, leases, secrets and tokens as JSON and
never needs the generated model classes (deserialising every watch event into
them would cost CPU this 2-core host needs for 64 pods). API errors are
translated here, once, into the few outcomes the agent acts on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = (5, 30)
# A watch may be quiet for minutes; bookmarks arrive about once a minute.
WATCH_SERVER_TIMEOUT_S = 300
WATCH_READ_TIMEOUT_S = WATCH_SERVER_TIMEOUT_S + 30
# One connection per concurrently busy thread: status writer, watch, heartbeats, and
# pod workers, which all fetch Secrets and tokens at once when many pods arrive.
CONNECTION_POOL_SIZE = 128

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """The apiserver answered with an error status."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    """Already exists, or a resourceVersion/UID precondition failed."""


class Gone(ApiError):
    """A watch's resourceVersion is too old: relist."""


class Unavailable(Exception):
    """The apiserver could not be reached (restarting, or the connection broke)."""


def _translate(error: Exception) -> Exception:
    if isinstance(error, ApiException):
        if error.status == 0:
            return Unavailable(str(error.reason))
        try:
            body = json.loads(error.body or "{}")
        except ValueError:
            body = {}
        reason = body.get("reason", error.reason or "")
        message = body.get("message", str(error.body))
        kind = {404: NotFound, 409: Conflict, 410: Gone}.get(error.status, ApiError)
        if error.status >= 500 or error.status == 429:
            return Unavailable(f"{error.status} {reason}: {message}")
        return kind(error.status, reason, message)
    return Unavailable(f"{type(error).__name__}: {error}")


class KubeApi:
    """JSON requests against the apiserver named by a kubeconfig."""

    def __init__(self, kubeconfig: Path):
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
        # Retrying is the callers' business: they know what is safe to repeat.
        configuration.retries = False
        self._client = client.ApiClient(configuration)

    def request(
        self,
        method: str,
        path: str,
        body: dict | list | None = None,
        query: dict | None = None,
        content_type: str = "application/json",
    ) -> dict:
        try:
            response = self._client.call_api(
                path,
                method,
                query_params=[(key, value) for key, value in (query or {}).items() if value is not None],
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=REQUEST_TIMEOUT_S,
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
            raise _translate(error) from error
        return json.loads(response.data or b"{}")

    def get(self, path: str, **query) -> dict:
        return self.request("GET", path, query=query)

    def create(self, path: str, body: dict) -> dict:
        return self.request("POST", path, body=body)

    def replace(self, path: str, body: dict) -> dict:
        return self.request("PUT", path, body=body)

    def patch(self, path: str, body: dict, content_type: str = MERGE_PATCH) -> dict:
        return self.request("PATCH", path, body=body, content_type=content_type)

    def delete(self, path: str, body: dict | None = None) -> dict:
        return self.request("DELETE", path, body=body)

    def watch(self, path: str, **query) -> Iterator[dict]:
        """Events of one watch request until the server ends it; errors are translated."""
        query = {"watch": "true", "timeoutSeconds": WATCH_SERVER_TIMEOUT_S, **query}
        try:
            response = self._client.call_api(
                path,
                "GET",
                query_params=[(key, value) for key, value in query.items() if value is not None],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=(REQUEST_TIMEOUT_S[0], WATCH_READ_TIMEOUT_S),
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
            raise _translate(error) from error
        try:
            for line in iter_resp_lines(response):
                if line:
                    yield json.loads(line)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            raise Unavailable(f"watch {path} broke: {error}") from error
        finally:
            response.release_conn()

    def server_version(self) -> str:
        return self.get("/version").get("gitVersion", "v0.0.0")


def pod_path(namespace: str, name: str, subresource: str = "") -> str:
    path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
    return f"{path}/{subresource}" if subresource else path


def namespaced_path(kind_plural: str, namespace: str, name: str = "", group: str = "") -> str:
    base = f"/apis/{group}" if group else "/api/v1"
    path = f"{base}/namespaces/{quote(namespace)}/{kind_plural}"
    return f"{path}/{quote(name)}" if name else path
