"""`cancel`: delete the manager, and so the whole job.

Deleting the manager pod sends it SIGTERM: it deletes the job's workers, chief and
Secret itself, and the garbage collector deletes whatever it owns that is left. A
manager submitted as a batch/v1 Job is deleted through its Job (propagation
Background), so the Job controller cannot start another. What existed before is listed
first, then confirmed gone, so the user sees exactly what was deleted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from distributetrain.cli.jobs.api import JobsKube
from distributetrain.cli.jobs.lookup import FoundJob
from distributetrain.core import names
from distributetrain.core.clock import Clock

log = logging.getLogger(__name__)

# The manager's grace period (manager_spec.MANAGER_TERMINATION_GRACE_S) for its own
# teardown, then garbage collection of anything left.
DEFAULT_CANCEL_TIMEOUT = "2m"
POLL_INTERVAL_S = 0.5


@dataclass(frozen=True)
class Cancellation:
    deleted: list[str]  # "kind/name" of every object that existed and is gone
    remaining: list[str]  # still there at the deadline


def existing_objects(kube: JobsKube, found: FoundJob) -> list[str]:
    """Everything of the job that exists now, as "kind/name", the manager first."""
    present = []
    if found.batch_job is not None and kube.read("Job", found.namespace, found.name) is not None:
        present.append(f"job/{found.name}")
    if found.job_name:
        if kube.read("Pod", found.namespace, found.job_name) is not None:
            present.append(f"pod/{found.job_name}")
        pods, _ = kube.list_all("Pod", found.namespace, label_selector=names.job_selector(found.job_name))
        present += sorted(f"pod/{p['metadata']['name']}" for p in pods if p["metadata"]["name"] != found.job_name)
        secrets = kube.list_all("Secret", found.namespace, label_selector=names.job_selector(found.job_name))[0]
        present += sorted(f"secret/{s['metadata']['name']}" for s in secrets)
    return present


def cancel(kube: JobsKube, found: FoundJob, timeout_s: float, clock: Clock) -> Cancellation:
    before = existing_objects(kube, found)
    if found.batch_job is not None:
        kube.delete("Job", found.namespace, found.name)
    else:
        kube.delete("Pod", found.namespace, found.job_name)
    give_up_at = clock.monotonic() + timeout_s
    remaining = before
    while remaining and clock.monotonic() < give_up_at:
        clock.sleep(POLL_INTERVAL_S)
        now_present = set(existing_objects(kube, found))
        remaining = [o for o in before if o in now_present]
    return Cancellation([o for o in before if o not in remaining], remaining)
