"""Post-training: follow a started attempt to the chief's end.

The port of the seeds' DistributeTrain_PostTraining.py, which polled every 20 s until
the chief was Completed and deleted the workers. Here a watch sees every change at
once: the chief ending (its exit code becomes the manager's), a worker failing or
vanishing (the attempt is lost), the chief never starting, or the job's deadline; a node
lost by the node lifecycle controller's verdict takes the job's pods on it along
(``nodewatch``). How training is followed is the job's kind's (``kinds``): an elastic
job's follower keeps the hosts current and replaces lost workers. What a lost attempt leads to (a restart, or
the end) is the job loop's decision (``job``).
"""

from __future__ import annotations

import logging

from distributetrain.core import errors, exitcodes
from distributetrain.core.placement.placement import Plan
from distributetrain.kube.client import Kube
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.watching import podwaits
from distributetrain.manager.placement.kinds import ElasticJob, StaticJob
from distributetrain.manager.watching.nodewatch import NodeWatch
from distributetrain.manager.reporting.reporting import PodWaits
from distributetrain.manager.processstate import ProcessState
from distributetrain.manager.watching.startwatch import StartWatch

log = logging.getLogger(__name__)


class PostTraining:
    def __init__(self, kube: Kube, state: ProcessState, plan: Plan, kind: StaticJob | ElasticJob):
        self.kube = kube
        self.state = state
        self.kind = kind  # how training is followed
        self.plan = plan  # the attempt's shares, the chief's last
        self.settings = state.settings
        self.reporter = state.reporter
        self.deadline = state.deadline
        self.pods = state.pods

    def follow(self) -> int:
        """The chief's exit code; raise ``AttemptLost`` when the attempt is lost, ``JobFailed`` when it broke."""
        settings = self.settings
        chief, workers = self.state.attempt.chief, self.state.attempt.workers(len(self.plan) - 1)
        with NodeWatch(self.kube, settings, self.reporter, clock=self.state.clock):
            outcome = self._follow(chief, workers)
        if isinstance(outcome, podwaits.ChiefFinished):
            return outcome.exit_code
        if isinstance(outcome, podwaits.PodLost):
            raise outcome.error()
        if self.state.clock.monotonic() >= self.deadline:
            raise errors.JobFailed(f"job exceeded --active-deadline {settings.active_deadline_s:.0f}s",
                                   exitcodes.TIMED_OUT)
        reasons = "; ".join(f"{pod}: {why}" for pod, why in outcome.waiting_for.items())
        raise errors.JobFailed(f"chief did not start within {settings.worker_ready_timeout_s:.0f}s ({reasons})",
                               exitcodes.TIMED_OUT)

    def _follow(self, chief: str, workers: list[str]) -> podwaits.Outcome:
        """From the chief's creation to its end (or the attempt's loss, or a deadline). Its
        image pull, however long, does not count against --worker-ready-timeout (``startwatch``)."""
        settings = self.settings
        expected = [chief, *workers]
        pod_waits = PodWaits(self.reporter, expected, self.state.clock)
        try:
            with StartWatch(self.kube, settings, self.state.clock) as starting:
                outcome = starting.wait(self.pods, podwaits.chief_started(chief, workers), expected, self.deadline,
                                        pod_waits)
        finally:
            pod_waits.done()
        if not isinstance(outcome, podwaits.ChiefStarted):
            return outcome
        self.reporter.events.record(jobevents.CHIEF_STARTED, f"{chief} is running: training started")
        self.reporter.phase("Training")
        return self.kind.follow(self.kube, self.state, chief, workers)
