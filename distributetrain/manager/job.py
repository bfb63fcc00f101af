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

Either way the lost attempt is torn down and its pods are waited out before the next
one plans: until they are gone the scheduler counts their GPUs as used, so a job that
fills its cluster would otherwise find no room for itself. The attempt (``processstate``) is
moved on here alone (``Job._next_attempt``); it and the restarts used live on the manager pod (the job's
``record``), the loop's only state across processes: ``manager.sh`` runs the loop
twice, pre-training stopping once the current attempt has started, post-training
picking it up and following it to the end.
"""

from __future__ import annotations

import contextlib
import logging
import math
import urllib.parse
from collections.abc import Callable

from distributetrain.core import errors, exitcodes, restarts
from distributetrain.core.clock import Clock, monotonic_at
from distributetrain.core.names import Attempt
from distributetrain.core.record import JobRecord
from distributetrain.core.settings import JobSettings
from distributetrain.kube import waits
from distributetrain.kube.client import Kube
from distributetrain.manager import jobevents, podwaits, quotawait, scaleup
from distributetrain.manager.discovery import DiscoveryServer, HostList
from distributetrain.manager.kinds import kind_of
from distributetrain.manager.posttraining import PostTraining
from distributetrain.manager.pretraining import AttemptNotStarted, PreTraining, placement_of
from distributetrain.manager.reporting import Reporter
from distributetrain.manager.processstate import ProcessState
from distributetrain.manager.teardown import tear_down

log = logging.getLogger(__name__)

# How long a lost attempt's pods may take to go before the next attempt plans anyway:
# their grace period (--termination-grace-period), and this for the kubelet to confirm.
# One on a dead node may never go; its node is not a candidate for the next plan either.
OLD_PODS_GONE_SLACK_S = 20.0


def old_pods_gone_s(settings: JobSettings) -> float:
    return settings.termination_grace_period_s + OLD_PODS_GONE_SLACK_S


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
                except errors.AttemptLost as lost:
                    self._restart(lost)
                except AttemptNotStarted as late:
                    self._plan_again(late)
                except errors.QuotaFull as full:
                    self._wait_for_quota(full)
                except scaleup.NodesNotComing as not_coming:
                    self._stop_growing(not_coming)

    def _serving_hosts(self) -> contextlib.AbstractContextManager:
        # Without an address nothing can ask (and pre-flight refuses to create a chief).
        if not self.settings.discovery_url:
            return contextlib.nullcontext()
        return DiscoveryServer(self.state.hosts, port=urllib.parse.urlsplit(self.settings.discovery_url).port)

    def _restart(self, lost: errors.AttemptLost) -> None:
        """The next attempt after a lost one, if the budget and the deadline allow; else raise ``lost``."""
        reporter = self.state.reporter
        used = reporter.record().restarts
        clock = self.state.clock
        left_s = self.state.deadline - clock.monotonic()
        backoff_s = restarts.restart_backoff(used, self.settings.max_restarts, left_s)
        if backoff_s is None:
            raise lost
        self._end_attempt()
        # Recorded after the teardown: a manager restarted in between finds the lost
        # attempt again and counts this restart once.
        self._next_attempt(lambda attempt: reporter.restarting(used + 1, self.settings.max_restarts, lost.cause,
                                                               attempt, backoff_s))
        clock.sleep(backoff_s)

    def _plan_again(self, late: AttemptNotStarted) -> None:
        """Release an attempt that did not start in time; plan anew while GPUs may be waited for."""
        self._end_attempt()
        give_up = self.state.clock.monotonic() >= min(self.state.gpus_until, self.state.deadline)
        timeout_s = self.settings.worker_ready_timeout_s
        self.state.reporter.events.record(
            jobevents.RELEASED, f"pods not Ready within {timeout_s:.0f}s ({late}); released them"
                             + ("" if give_up else " and planning again"))
        if give_up:
            raise errors.JobFailed(f"pods not Ready within {timeout_s:.0f}s; released them ({late})",
                                   exitcodes.TIMED_OUT)
        log.warning("job %s: pods not Ready in time (%s); released them and planning again",
                    self.settings.job_name, late)
        self._next_attempt()

    def _wait_for_quota(self, full: errors.QuotaFull) -> None:
        """A quota full for now: release what the attempt created and wait (``quotawait``)
        for the quota to change while GPUs may be waited for; else raise ``full`` (73)."""
        until = min(self.state.gpus_until, self.state.deadline)
        if self.state.clock.monotonic() >= until:
            raise full
        self._end_attempt()
        self.state.reporter.events.record(jobevents.RELEASED, f"ResourceQuota {full.quota} refused the job's "
                                                             "pods; released what the attempt created")
        self._next_attempt()
        if isinstance(self.quota_wait.wait(full, until), quotawait.StillFull):
            raise full

    def _stop_growing(self, not_coming: scaleup.NodesNotComing) -> None:
        """Release the attempt whose new nodes are not coming, so its shares on running
        nodes do not hold their GPUs idle, and plan on free GPUs alone from now on."""
        self._end_attempt()
        self.state.growth_stopped = not_coming.cause
        left_s = max(0.0, min(self.state.gpus_until, self.state.deadline) - self.state.clock.monotonic())
        self.state.reporter.events.record(
            jobevents.RELEASED, f"{not_coming.cause}; released the job's pods and waiting up to {left_s:.0f}s more for "
                             "free GPUs (--wait-for-gpus)")
        log.warning("job %s: %s; released its pods, waiting for free GPUs", self.settings.job_name, not_coming.cause)
        self._next_attempt()

    def _next_attempt(self, record: Callable[[int], None] | None = None) -> None:
        """Move on to the next attempt, whose pods get new names (a released pod may still be
        terminating), and record it (``record``, by default the attempt alone) before any
        of them is created."""
        self.state.attempt = self.state.attempt.next()
        (record or self.state.reporter.record_attempt)(self.state.attempt.number)

    def _end_attempt(self) -> None:
        """Delete the attempt's pods and wait (bounded) until they are gone."""
        settings = self.settings
        self.state.hosts.publish(None)
        tear_down(self.kube, settings, keep_chief=False)
        self.state.pods.relist()  # judged from after the deletions: those done at once are gone from it
        clock = self.state.clock
        gone_within_s = old_pods_gone_s(settings)
        left = podwaits.wait_until_gone(self.state.pods, clock.monotonic() + gone_within_s)
        if left:
            log.warning("job %s: %s still terminating after %.0fs (a lost node?); planning without their GPUs",
                        settings.job_name, ", ".join(sorted(left)), gone_within_s)
