"""The same creates and deletes as one job of section 3, made by a plain client loop.

Why: the manager's overhead (start -> workers created, chief exit -> teardown done)
mixes what is the manager's own with what the API server takes for the same requests
anyway (at 64 workers each delete took 2.7-4.5 s on the loaded machine). This is the
reference: the objects the manager creates for a job of ``W`` workers (the Secret, the
workers pinned to the same nodes, the chief, built by the manager's own ``manifests``),
created one request after the other by the benchmark's own ``kubernetes`` client
(``CoreV1Api``, its defaults: no retries, no threads), waited Ready (not timed), then
deleted pod by pod and the Secret, as a script that knows nothing better would. Section 3
publishes the manager's figure over this one: under 1 the manager does better than the
plain loop (requests in flight, one deletecollection), over 1 it adds its own work.
"""

from __future__ import annotations

import time

from kubernetes import client

from distributetrain.core.pods import manifests
from distributetrain.core import names
from distributetrain.core.settings import JobSettings
from distributetrain.core.pods.sshkeys import JobKeys
from distributetrain.kube.calls import drain

READY_DEADLINE_S = 300.0  # the workers Ready before the deletes start; not timed
READY_POLL_S = 1.0


def bare_run(api_client, settings: JobSettings, nodes: list[str]) -> dict:
    """Create one attempt's objects on ``nodes`` (the workers', then the chief's), wait until
    the workers are Ready, delete them all; the create and delete loops' wall times."""
    core = client.CoreV1Api(api_client)
    namespace, job = settings.namespace, settings.job_name
    secret, *pods = manifests.job_objects(settings, [(node, 1) for node in nodes], JobKeys.generate(job))
    # Each body read to its end (drain): a connection released with its response unread goes
    # back to the pool mid-response, and the next request on it fails (ResponseNotReady).
    started = time.time()
    drain(core.create_namespaced_secret(namespace, secret, _preload_content=False))
    for pod in pods:
        drain(core.create_namespaced_pod(namespace, pod, _preload_content=False))
    created = time.time()
    _wait_ready(core, settings, [pod["metadata"]["name"] for pod in pods[:-1]])
    deleting = time.time()
    for pod in pods:
        drain(core.delete_namespaced_pod(pod["metadata"]["name"], namespace, _preload_content=False))
    drain(core.delete_namespaced_secret(names.secret_name(job), namespace, _preload_content=False))
    deleted = time.time()
    return {"bare_create_s": created - started, "bare_delete_s": deleted - deleting,
            "bare_requests": 2 * (len(pods) + 1)}


def _wait_ready(core: client.CoreV1Api, settings: JobSettings, workers: list[str]) -> None:
    give_up_at = time.monotonic() + READY_DEADLINE_S
    while True:
        listed = core.list_namespaced_pod(settings.namespace, label_selector=settings.selector)
        ready = {pod.metadata.name for pod in listed.items
                 if any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or ()))}
        if set(workers) <= ready:
            return
        if time.monotonic() > give_up_at:
            raise TimeoutError(f"bare run {settings.job_name}: workers not Ready in {READY_DEADLINE_S:.0f}s")
        time.sleep(READY_POLL_S)
