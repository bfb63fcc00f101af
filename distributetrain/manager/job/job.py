"""One job, one loop: attempts, one after another, until the job ends.

An attempt is one set of the job's pods under one plan (``<job>-worker-<i>-r<k>``,
``<job>-chief-r<k>``). Each pass of the loop starts the current attempt, or adopts it
(``pretraining``), then follows it to the chief's end (``posttraining``). When the
attempt is lost, ``nextattempt`` alone decides what comes next: another attempt, or the
job's end. The attempt and the restarts used live on the manager pod (the job's
``record``), the loop's only state across processes: ``manager.sh`` runs the loop
twice, pre-training stopping once the current attempt has started, post-training
picking it up and following it to the end.
"""

from __future__ import annotations

import contextlib
import math
import urllib.parse

from distributetrain.core import exitcodes
from distributetrain.core.clock import Clock, monotonic_at
from distributetrain.core.names import Attempt
from distributetrain.core.job.record import JobRecord
from distributetrain.core.settings import JobSettings
from distributetrain.kube import waits
from distributetrain.kube.client import Kube
from distributetrain.manager.placement import quotawait
from distributetrain.manager.pods.discovery import DiscoveryServer, HostList
from distributetrain.manager.placement.kinds import kind_of
from distributetrain.manager.job import nextattempt
from distributetrain.manager.job.posttraining import PostTraining
from distributetrain.manager.job.pretraining import PreTraining, placement_of
from distributetrain.manager.reporting.reporting import Reporter
from distributetrain.manager.processstate import ProcessState


class Job:
    """``record`` is the job's as this process found it; ``clock`` the one every window,
    deadline and wait of the job reads."""

    def __init__(self, kube: Kube, settings: JobSettings, reporter: Reporter, record: JobRecord, clock: Clock):
        self.kube = kube
        self.settings = settings
        self.reporter = reporter
        self.record = record
        self.clock = clock

    def drive(self, until_started: bool = False) -> int:
        """Follow the job to the chief's end and return its exit code; with
        ``until_started``, return 0 once the current attempt has started. Failures raise,
        typed, with the exit code that reports them. What ends the job tears it down
        (``lifecycle``); a lost attempt is torn down here, before the next one plans."""
        state = self._picked_up()
        kind = kind_of(self.settings)  # static or elastic: its plans, how it is followed
        # Direct or through a Kueue queue: how each attempt gets its GPUs.
        placement = placement_of(self.kube, state, kind)
        quota_wait = quotawait.QuotaWait(self.kube, self.settings, self.reporter, self.clock)
        # Without an address nothing can ask (and pre-flight refuses to create a chief).
        url = self.settings.discovery_url
        serving = DiscoveryServer(state.hosts, port=urllib.parse.urlsplit(url).port) if url else contextlib.nullcontext()
        with serving, contextlib.closing(state.pods):
            while True:
                try:
                    plan = PreTraining(self.kube, state, placement).start()
                    if until_started:
                        return exitcodes.OK
                    return PostTraining(self.kube, state, plan, kind).follow()
                except nextattempt.LOST_ATTEMPT as ended:
                    nextattempt.move_on(self.kube, state, quota_wait, ended)

    def _picked_up(self) -> ProcessState:
        """The job's state in this process, picked up from its record on the manager pod: the
        current attempt, and the start --active-deadline counts from (none known: now), so
        it holds when manager.sh moves from pre- to post-training, or when a restarted
        container adopts the job."""
        settings, clock, record = self.settings, self.clock, self.record
        deadline = math.inf
        if settings.active_deadline_s:
            deadline = monotonic_at(clock, (record.started_at or clock.now()) + settings.active_deadline_s)
        return ProcessState(settings, self.reporter, Attempt(settings.job_name, record.attempt), deadline,
                            gpus_until=clock.monotonic() + settings.wait_for_gpus_s, hosts=HostList(), clock=clock,
                            pods=waits.selected_pods(self.kube, settings.namespace, settings.selector, clock))
