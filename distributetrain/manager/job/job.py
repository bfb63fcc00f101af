"""One job, one loop: attempts, one after another, until the job ends.

An attempt is one set of the job's pods under one plan (``<job>-worker-<i>-r<k>``,
``<job>-chief-r<k>``). Each pass of the loop starts the current attempt, or adopts it
(``pretraining``), then follows it to the chief's end (``posttraining``). When the
attempt is lost, the loop alone decides what comes next:

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
deleted and waited out before the next one plans: until they are gone the scheduler counts their GPUs as used, so a job that
fills its cluster would otherwise find no room for itself. The attempt (``processstate``) is
moved on here alone (``Job._move_on``); it and the restarts used live on the manager pod (the job's
``record``), the loop's only state across processes: ``manager.sh`` runs the loop
twice, pre-training stopping once the current attempt has started, post-training
picking it up and following it to the end.
"""

from __future__ import annotations

import contextlib
import logging
import math
import urllib.parse

from distributetrain.core import errors, exitcodes
from distributetrain.core.job import restarts
from distributetrain.core.clock import Clock, monotonic_at
from distributetrain.core.names import Attempt
from distributetrain.core.job.record import JobRecord
from distributetrain.core.settings import JobSettings
from distributetrain.kube import waits
from distributetrain.kube.client import Kube
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.placement import quotawait, scaleup
from distributetrain.manager.watching import teardown
from distributetrain.manager.pods.discovery import DiscoveryServer, HostList
from distributetrain.manager.placement.kinds import kind_of
from distributetrain.manager.job.posttraining import PostTraining
from distributetrain.manager.job.pretraining import AttemptNotStarted, PreTraining, placement_of
from distributetrain.manager.reporting.reporting import Reporter
from distributetrain.manager.processstate import ProcessState

log = logging.getLogger(__name__)

class Job:
    """``record`` is the job's as this process found it; ``clock`` the one every window,
    deadline and wait of the job reads."""

    def __init__(self, kube: Kube, settings: JobSettings, reporter: Reporter, record: JobRecord, clock: Clock):
        self.kube = kube
        self.settings = settings
        # Picked up from the job's record as this process found it on the manager pod: the
        # current attempt, and the start --active-deadline counts from (none known: now), so
        # it holds when manager.sh moves from pre- to post-training, or when a restarted
        # container adopts the job.
        deadline = math.inf
        if settings.active_deadline_s:
            deadline = monotonic_at(clock, (record.started_at or clock.now()) + settings.active_deadline_s)
        self.state = ProcessState(settings, reporter, Attempt(settings.job_name, record.attempt), deadline,
                                  gpus_until=clock.monotonic() + settings.wait_for_gpus_s, hosts=HostList(), clock=clock,
                                  pods=waits.selected_pods(kube, settings.namespace, settings.selector, clock))
        self.kind = kind_of(settings)  # static or elastic: its plans, how it is followed
        # Direct or through a Kueue queue: how each attempt gets its GPUs.
        self.placement = placement_of(kube, self.state, self.kind)
        self.quota_wait = quotawait.QuotaWait(kube, settings, reporter, self.state.clock)

    def drive(self, until_started: bool = False) -> int:
        """Follow the job to the chief's end and return its exit code; with
        ``until_started``, return 0 once the current attempt has started. Failures raise,
        typed, with the exit code that reports them. What ends the job tears it down
        (``lifecycle``); a lost attempt is torn down here, before the next one plans."""
        with self._serving_hosts(), contextlib.closing(self.state.pods):
            while True:
                try:
                    plan = PreTraining(self.kube, self.state, self.placement).start()
                    if until_started:
                        return exitcodes.OK
                    return PostTraining(self.kube, self.state, plan, self.kind).follow()
                except (errors.AttemptLost, AttemptNotStarted, errors.QuotaFull, scaleup.NodesNotComing) as ended:
                    self._move_on(ended)

    def _serving_hosts(self) -> contextlib.AbstractContextManager:
        # Without an address nothing can ask (and pre-flight refuses to create a chief).
        if not self.settings.discovery_url:
            return contextlib.nullcontext()
        return DiscoveryServer(self.state.hosts, port=urllib.parse.urlsplit(self.settings.discovery_url).port)

    def _move_on(self, ended: errors.AttemptLost | AttemptNotStarted | errors.QuotaFull | scaleup.NodesNotComing
                 ) -> None:
        """Release an attempt that ended early, say why, and move on to the next one (the
        module's docstring says when); raise when the job ends with it."""
        settings = self.settings
        state, clock, reporter = self.state, self.state.clock, self.state.reporter
        until = min(state.gpus_until, state.deadline)
        if isinstance(ended, errors.AttemptLost):
            used = reporter.record().restarts
            backoff_s = restarts.restart_backoff(used, settings.max_restarts, state.deadline - clock.monotonic())
            if backoff_s is None:
                raise ended
        if isinstance(ended, errors.QuotaFull) and clock.monotonic() >= until:
            raise ended
        teardown.release_attempt(self.kube, state)
        # The next attempt's pods get new names (a released pod may still be terminating);
        # it is recorded before any of them is created.
        following = state.attempt.next()
        if isinstance(ended, errors.AttemptLost):
            # Recorded after the release: a manager restarted in between finds the lost
            # attempt again and counts this restart once.
            state.attempt = following
            reporter.restarting(used + 1, settings.max_restarts, ended.cause, following.number, backoff_s)
            clock.sleep(backoff_s)
            return
        if isinstance(ended, AttemptNotStarted):
            timeout_s, give_up = settings.worker_ready_timeout_s, clock.monotonic() >= until
            reporter.events.record(jobevents.RELEASED, f"pods not Ready within {timeout_s:.0f}s ({ended}); released "
                                                       "them" + ("" if give_up else " and planning again"))
            if give_up:
                raise errors.JobFailed(f"pods not Ready within {timeout_s:.0f}s; released them ({ended})",
                                       exitcodes.TIMED_OUT)
            log.warning("job %s: pods not Ready in time (%s); released them and planning again", settings.job_name,
                        ended)
        elif isinstance(ended, errors.QuotaFull):
            reporter.events.record(jobevents.RELEASED, f"ResourceQuota {ended.quota} refused the job's pods; "
                                                       "released what the attempt created")
        else:  # the new nodes are not coming: plan on free GPUs alone from now on
            state.growth_stopped = ended.cause
            reporter.events.record(jobevents.RELEASED, f"{ended.cause}; released the job's pods and waiting up to "
                                   f"{max(0.0, until - clock.monotonic()):.0f}s more for free GPUs (--wait-for-gpus)")
            log.warning("job %s: %s; released its pods, waiting for free GPUs", settings.job_name, ended.cause)
        state.attempt = following
        reporter.record_attempt(following.number)
        if isinstance(ended, errors.QuotaFull) and isinstance(self.quota_wait.wait(ended, until), quotawait.StillFull):
            raise ended
