"""Post-training: follow the chief to its end, then tear the job down.

The port of the seeds' DistributeTrain_PostTraining.py, which polled every 20 s until
the chief was Completed and deleted the workers. Here a watch sees every change at
once: the chief ending (its exit code becomes the manager's), a worker failing or
vanishing (abort), the chief never starting (it could not be scheduled), or the
job's deadline; a node that stops being Ready takes the job's pods on it along
(``nodewatch`` deletes them at once, not after the taint's eviction). Whatever
happens, the workers and the Secret are deleted; the chief is kept for its logs when
it finished, unless ``--delete-chief``.

A pod lost for a reason outside the training script (``errors.PodLost``) starts the
job again while ``--max-restarts`` allows: the attempt is torn down, and after a
backoff pre-training plans anew (whatever GPUs are free now) under fresh pod names.
The training script resumes from its checkpoints. A chief that fails on its own is
the script's failure and is never retried.
"""

from __future__ import annotations

import contextlib
import logging
import time

from distributetrain import errors, events, exitcodes, names, restarts, waits
from distributetrain.discovery import DiscoveryServer, HostList
from distributetrain.elastic import ElasticFollower
from distributetrain.kube import Kube
from distributetrain.nodewatch import NodeWatch
from distributetrain.pretraining import PreTraining, job_pods
from distributetrain.reporting import PodWaits, Reporter
from distributetrain.settings import JobSettings
from distributetrain.teardown import tear_down

log = logging.getLogger(__name__)


class PostTraining:
    def __init__(self, kube: Kube, settings: JobSettings, reporter: Reporter, deadline: float):
        self.kube = kube
        self.settings = settings
        self.reporter = reporter
        self.deadline = deadline
        self.hosts = HostList()  # an elastic job's hosts, served to its chief

    def run(self) -> int:
        """Return the chief's exit code; raise ``JobFailed`` when the job broke. Always tears down."""
        keep_chief = False
        serving = DiscoveryServer(self.hosts) if self.settings.elastic else contextlib.nullcontext()
        try:
            with serving:
                while True:
                    try:
                        code = self._follow()
                    except errors.PodLost as lost:
                        if not self._restart(lost):
                            raise
                        continue
                    keep_chief = not self.settings.delete_chief
                    return code
        finally:
            deleted = tear_down(self.kube, self.settings, keep_chief=keep_chief)
            log.info("job %s torn down: %s", self.settings.job_name, ", ".join(deleted) or "nothing left")

    def _restart(self, lost: errors.PodLost) -> bool:
        """Start the next attempt if the budget and the deadline allow; False if not."""
        settings = restarts.next_attempt(self.kube, self.settings, self.reporter, self.deadline, lost)
        if settings is None:
            return False
        pre_training = PreTraining(self.kube, settings, self.reporter, self.deadline)
        pre_training.run()
        self.settings = pre_training.settings
        return True

    def _expected_workers(self, pods: dict[str, dict]) -> list[str]:
        """Workers from the recorded plan: one deleted before this process started is lost, not absent."""
        plan = self.reporter.plan()
        if plan is not None:
            return [names.worker_name(self.settings.job_name, i, self.settings.attempt) for i in range(len(plan) - 1)]
        return sorted(
            name for name, pod in pods.items()
            if pod["metadata"].get("labels", {}).get(names.LABEL_ROLE) == names.ROLE_WORKER
        )

    def _follow(self) -> int:
        settings = self.settings
        pods = job_pods(self.kube, settings)
        chief = names.chief_name(settings.job_name, settings.attempt)
        if chief not in pods:
            raise errors.JobFailed(f"job {settings.job_name} has no chief: pre-training did not finish",
                                   exitcodes.INTERNAL_ERROR)
        workers = self._expected_workers(pods)
        self.hosts.publish([])  # nothing from an earlier attempt: its chief's script keeps its own list
        start_by = min(time.monotonic() + settings.worker_ready_timeout_s, self.deadline)
        with NodeWatch(self.kube, settings, self.reporter):
            outcome = self._follow_attempt(chief, workers, start_by)
        if isinstance(outcome, waits.ChiefFinished):
            return outcome.exit_code
        if isinstance(outcome, waits.PodLost):
            raise errors.PodLost(f"pod {outcome.pod} {outcome.reason}", exitcodes.WORKER_LOST)
        if time.monotonic() >= self.deadline:
            raise errors.JobFailed(f"job exceeded --active-deadline {settings.active_deadline_s:.0f}s",
                                   exitcodes.TIMED_OUT)
        reasons = "; ".join(f"{pod}: {why}" for pod, why in outcome.waiting_for.items())
        raise errors.JobFailed(f"chief did not start within {settings.worker_ready_timeout_s:.0f}s ({reasons})",
                               exitcodes.TIMED_OUT)

    def _follow_attempt(self, chief: str, workers: list[str], start_by: float) -> waits.Outcome:
        """From the chief's creation to its end (or the attempt's loss, or a deadline)."""
        settings = self.settings
        expected = [chief, *workers]
        pod_waits = PodWaits(self.reporter, expected)
        try:
            outcome = waits.watch_job(self.kube, settings.namespace, settings.job_name,
                                      pod_waits.watching(waits.chief_started(chief, workers)), start_by, expected)
        finally:
            pod_waits.done()
        if not isinstance(outcome, waits.ChiefStarted):
            return outcome
        self.reporter.events.record(events.CHIEF_STARTED, f"{chief} is running: training started")
        self.reporter.phase("Training")
        if settings.elastic:
            return ElasticFollower(self.kube, settings, self.reporter, self.hosts, self.deadline).run()
        return waits.watch_job(self.kube, settings.namespace, settings.job_name,
                               waits.chief_finished(chief, workers), self.deadline, expected)
