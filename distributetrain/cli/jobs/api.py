"""The API calls the user's commands make beyond the manager's: creating the manager and
reading pod logs (batch/v1 Jobs and Secrets are ``Kube``'s kinds like any).

Built on ``distributetrain.kube.client.Kube``, so errors are translated and transient
failures retried the same way, once, at this boundary.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Iterator

import urllib3

from distributetrain.core import errors
from distributetrain.kube.calls import send
from distributetrain.kube.client import Kube
from distributetrain.kube.connection import API_REQUEST_TIMEOUT_S

log = logging.getLogger(__name__)

LOG_CHUNK_BYTES = 4096


class JobsKube(Kube):
    """``Kube`` with the user's commands' own calls: the manager's creation logged, pod logs."""

    def create(self, obj: dict, dry_run: bool = False) -> dict:
        """Create the manager's Pod or batch/v1 Job (with `dry_run`, as admission would:
        mutated and validated, nothing stored); ``errors.AlreadyExists`` if the name is taken."""
        created = super().create(obj, dry_run)
        if not dry_run:
            log.info("created %s [%s/%s]", obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        return created

    def pod_log(self, namespace: str, pod: str, container: str, follow: bool) -> Iterator[str]:
        """The container's output as text, as it arrives; with ``follow``, until the container ends."""
        # Following has no read timeout: a training step may print nothing for a long time.
        read_timeout = None if follow else API_REQUEST_TIMEOUT_S
        path = self._path("Pod", namespace, pod) + "/log"
        query = [("container", container), *((("follow", "true"),) if follow else ())]
        response = self._call(lambda: send(self.api_client, "GET", path, query, accept="*/*",
                                           timeout=(API_REQUEST_TIMEOUT_S, read_timeout)))
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            for chunk in response.stream(LOG_CHUNK_BYTES):
                yield decoder.decode(chunk)
            yield decoder.decode(b"", final=True)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise errors.TransientApiError(f"log stream of pod {namespace}/{pod} interrupted: {e}") from e
        finally:
            response.release_conn()
