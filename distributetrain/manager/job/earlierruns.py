"""What an earlier run of the same job name left behind, and whether it is in the way.

A job's pods and Secret are named after the job, so a manager re-applied under the same
name, or one whose job runs in another namespace (``--namespace``: no owner reference,
so no garbage collection), can find an earlier run's objects under its own names. They
are never adopted (they carry another manager's UID label, see ``names``); before this
run creates anything:

- an earlier run's pod being deleted, or one the garbage collector will delete (its
  owner reference names another manager pod), is waited out;
- one that has finished holds nothing but its name (an earlier chief kept for its logs):
  it is deleted, as the garbage collector would once its manager is gone;
- one still running or waiting without an owner reference belongs to a manager this one
  cannot see: the job name is taken, which is bad input (``--job-name``), never a reason
  to delete another run's training;
- an earlier run's Secret goes once none of its pods is left.
"""

from __future__ import annotations

import logging

from distributetrain.core import errors, exitcodes, names
from distributetrain.core.placement import podstate
from distributetrain.core.clock import Clock
from distributetrain.core.settings import JobSettings
from distributetrain.kube import waits
from distributetrain.kube.client import Kube
from distributetrain.manager.watching import podwaits

log = logging.getLogger(__name__)

EARLIER_RUN_GONE_S = 60.0  # the garbage collector and a pod's grace period, with room


def is_earlier_run(obj: dict, settings: JobSettings) -> bool:
    """An object of the job's name that this manager did not create."""
    return bool(settings.owner_uid) and settings.owner_uid not in names.owner_uids(obj)


def in_the_way(pods: list[dict]) -> list[str]:
    """Earlier-run pods nothing will delete: running or waiting, with no owner reference."""
    return sorted(pod["metadata"]["name"] for pod in pods
                  if not podstate.is_terminating(pod) and not podstate.is_finished(pod)
                  and not pod["metadata"].get("ownerReferences"))


def clear(kube: Kube, settings: JobSettings, clock: Clock) -> None:
    """Make room for this run's objects, or raise ``UsageError`` when another run still trains;
    an earlier run's pods are waited out on ``clock``."""
    if not settings.owner_uid:
        return  # outside a manager pod nothing tells runs apart
    namespace = settings.namespace
    items, _ = kube.list_all("Pod", namespace, label_selector=names.job_selector(settings.job_name))
    earlier = [pod for pod in items if is_earlier_run(pod, settings) and podstate.is_training_pod(pod)]
    if blocking := in_the_way(earlier):
        raise errors.UsageError("--job-name", f"job {settings.job_name!r} already runs in namespace {namespace!r} "
                                              f"under another manager ({', '.join(blocking)}); choose another name "
                                              "or wait for it to end")
    finished = sorted(pod["metadata"]["name"] for pod in earlier
                      if podstate.is_finished(pod) and not podstate.is_terminating(pod))
    if finished:
        log.info("job %s: deleting finished pods of an earlier run of the same name: %s",
                 settings.job_name, ", ".join(finished))
        kube.delete_all("Pod", namespace, finished)
    if earlier:
        # Every run's pods of the job's name: the earlier run's are not this process's.
        every_run = waits.selected_pods(kube, namespace, names.job_selector(settings.job_name), clock)
        left = podwaits.wait_until_gone(every_run, clock.monotonic() + EARLIER_RUN_GONE_S,
                                        only={pod["metadata"]["name"] for pod in earlier})
        if left:
            raise errors.JobFailed(f"pods of an earlier run of job {settings.job_name} are still there after "
                                   f"{EARLIER_RUN_GONE_S:.0f}s: {', '.join(sorted(left))}", exitcodes.API_ERROR)
    secret = kube.read("Secret", namespace, names.secret_name(settings.job_name))
    if secret is not None and is_earlier_run(secret, settings):
        log.info("job %s: deleting the SSH Secret of an earlier run of the same name", settings.job_name)
        kube.delete("Secret", namespace, names.secret_name(settings.job_name))
