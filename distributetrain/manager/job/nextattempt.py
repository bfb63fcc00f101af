"""What comes after an attempt lost before the chief's end: the next attempt, or the job's end.

- a pod lost for a reason outside the training script: another attempt while
  ``--max-restarts`` and the deadline allow (``restarts``), else the job fails (71);
- pods not started within ``--worker-ready-timeout`` (someone took the GPUs, a node
  died): another attempt, re-planned, while ``--wait-for-gpus`` lasts, else 75;
- pods refused by a ResourceQuota full for now: another attempt once the quota's use
  changed (``quotawait``), while ``--wait-for-gpus`` lasts, else 73;
- no node coming for the pods of a scale-up (``scaleup``: an autoscaler at its limits,
  or none answering): another attempt that waits for free GPUs instead, while
  ``--wait-for-gpus`` lasts, else 69.

Either way the lost attempt is released (``teardown.release_attempt``): its pods are
deleted and waited out before the next one plans: until they are gone the scheduler
counts their GPUs as used, so a job that fills its cluster would otherwise find no room
for itself. The attempt is moved on here alone, and recorded on the manager pod (the
job's ``record``) before any pod of the next one is created.
"""

from __future__ import annotations

import logging
import typing

from distributetrain.core import errors, exitcodes
from distributetrain.core.job import restarts
from distributetrain.kube.api import KubeApi
from distributetrain.manager.job.pretraining import AttemptNotStarted
from distributetrain.manager.placement import quotawait, scaleup
from distributetrain.manager.processstate import ProcessState
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.watching import teardown

log = logging.getLogger(__name__)

LostAttempt = errors.AttemptLost | AttemptNotStarted | errors.QuotaFull | scaleup.NodesNotComing
LOST_ATTEMPT = typing.get_args(LostAttempt)  # the same, as ``except`` takes it


def move_on(kube: KubeApi, state: ProcessState, quota_wait: quotawait.QuotaWait, ended: LostAttempt) -> None:
    """Release an attempt that ended early, say why, and move on to the next one (the
    module's docstring says when); raise when the job ends with it."""
    settings, clock, reporter = state.settings, state.clock, state.reporter
    until = min(state.gpus_until, state.deadline)
    if isinstance(ended, errors.AttemptLost):
        used = reporter.record().restarts
        backoff_s = restarts.restart_backoff(used, settings.max_restarts, state.deadline - clock.monotonic())
        if backoff_s is None:
            raise ended
    if isinstance(ended, errors.QuotaFull) and clock.monotonic() >= until:
        raise ended
    teardown.release_attempt(kube, state)
    # The next attempt's pods get new names (a released pod may still be terminating).
    following = state.attempt.next()
    if isinstance(ended, errors.AttemptLost):
        # Recorded after the release: a manager restarted in between finds the lost
        # attempt again and counts this restart once.
        state.attempt = following
        reporter.restarting(used + 1, settings.max_restarts, ended.cause, following.number, backoff_s)
        clock.sleep(backoff_s)
        return
    _say_released(state, ended, until)
    state.attempt = following
    reporter.record_attempt(following.number)
    if isinstance(ended, errors.QuotaFull) and isinstance(quota_wait.wait(ended, until), quotawait.StillFull):
        raise ended


def _say_released(state: ProcessState, ended: AttemptNotStarted | errors.QuotaFull | scaleup.NodesNotComing,
                  until: float) -> None:
    """The Event (and log line) of an attempt released to be planned again; the job's
    failure when ``--wait-for-gpus`` is over for pods that never started."""
    settings, clock, events = state.settings, state.clock, state.reporter.events
    if isinstance(ended, AttemptNotStarted):
        timeout_s, give_up = settings.worker_ready_timeout_s, clock.monotonic() >= until
        events.record(jobevents.RELEASED, f"pods not Ready within {timeout_s:.0f}s ({ended}); released "
                                          "them" + ("" if give_up else " and planning again"))
        if give_up:
            raise errors.JobFailed(f"pods not Ready within {timeout_s:.0f}s; released them ({ended})",
                                   exitcodes.TIMED_OUT)
        log.warning("job %s: pods not Ready in time (%s); released them and planning again", settings.job_name, ended)
    elif isinstance(ended, errors.QuotaFull):
        events.record(jobevents.RELEASED, f"ResourceQuota {ended.quota} refused the job's pods; "
                                          "released what the attempt created")
    else:  # the new nodes are not coming: plan on free GPUs alone from now on
        state.growth_stopped = ended.cause
        events.record(jobevents.RELEASED, f"{ended.cause}; released the job's pods and waiting up to "
                                          f"{max(0.0, until - clock.monotonic()):.0f}s more for free GPUs "
                                          "(--wait-for-gpus)")
        log.warning("job %s: %s; released its pods, waiting for free GPUs", settings.job_name, ended.cause)
