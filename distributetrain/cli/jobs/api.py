"""The API calls the user's commands make beyond the manager's: batch/v1 Jobs, secret
listings, creating the manager and reading pod logs.

Built on ``distributetrain.kube.client.Kube``, so errors are translated and transient
failures retried the same way, once, at this boundary.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Iterator

import urllib3
from kubernetes import client

from distributetrain.core import errors
from distributetrain.core.clock import Clock
from distributetrain.kube.calls import read_json
from distributetrain.kube.client import Kube
from distributetrain.kube.connection import API_REQUEST_TIMEOUT_S

log = logging.getLogger(__name__)

LOG_CHUNK_BYTES = 4096


class JobsKube(Kube):
    def __init__(self, api_client: client.ApiClient, clock: Clock):
        super().__init__(api_client, clock)
        self.batch = client.BatchV1Api(api_client)

    def create(self, obj: dict, dry_run: bool = False) -> dict:
        """Create a Pod or a batch/v1 Job (with `dry_run`, as admission would: mutated and
        validated, nothing stored); ``errors.AlreadyExists`` if the name is taken."""
        kind, namespace, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        create = self.batch.create_namespaced_job if kind == "Job" else self.core.create_namespaced_pod
        options = {"dry_run": "All"} if dry_run else {}
        created = self._call(lambda: read_json(create(namespace, obj, _preload_content=False, **options)))
        if not dry_run:
            log.info("created %s [%s/%s]", kind, namespace, name)
        return created

    def get_batch_job(self, namespace: str, name: str) -> dict | None:
        try:
            return self._call(lambda: read_json(self.batch.read_namespaced_job(name, namespace, _preload_content=False)))
        except errors.NotFound:
            return None

    def list_batch_jobs(self, namespace: str | None, label_selector: str) -> list[dict]:
        kwargs = dict(label_selector=label_selector, _preload_content=False, _request_timeout=API_REQUEST_TIMEOUT_S)
        if namespace:
            return self._call(lambda: read_json(self.batch.list_namespaced_job(namespace, **kwargs)))["items"]
        return self._call(lambda: read_json(self.batch.list_job_for_all_namespaces(**kwargs)))["items"]

    def delete_batch_job(self, namespace: str, name: str) -> bool:
        """Delete the Job; the garbage collector then deletes its pod in the background."""
        body = client.V1DeleteOptions(propagation_policy="Background")
        try:
            self._call(lambda: self.batch.delete_namespaced_job(name, namespace, body=body, _preload_content=False))
        except errors.NotFound:
            return False
        log.info("deleted Job [%s/%s]", namespace, name)
        return True

    def list_secrets(self, namespace: str, label_selector: str) -> list[dict]:
        return self._call(
            lambda: read_json(
                self.core.list_namespaced_secret(
                    namespace, label_selector=label_selector, _preload_content=False,
                    _request_timeout=API_REQUEST_TIMEOUT_S,
                )
            )
        )["items"]

    def pod_log(self, namespace: str, pod: str, container: str, follow: bool) -> Iterator[str]:
        """The container's output as text, as it arrives; with ``follow``, until the container ends."""
        # Following has no read timeout: a training step may print nothing for a long time.
        read_timeout = None if follow else API_REQUEST_TIMEOUT_S
        response = self._call(
            lambda: self.core.read_namespaced_pod_log(
                pod, namespace, container=container, follow=follow, _preload_content=False,
                _request_timeout=(API_REQUEST_TIMEOUT_S, read_timeout),
            )
        )
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            for chunk in response.stream(LOG_CHUNK_BYTES):
                yield decoder.decode(chunk)
            yield decoder.decode(b"", final=True)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise errors.TransientApiError(f"log stream of pod {namespace}/{pod} interrupted: {e}") from e
        finally:
            response.release_conn()
