"""Waiting for an attempt to start, where starting slowly is progress.

The job's pods are followed through ``waits``; beside them, the Events of the job's
namespace tell which pods pull their image or await a new node (``startprogress``), and
``startbudget`` decides when the start is late: ``--worker-ready-timeout`` counts only
time no slow start explains, and each slow start has its own bound. While one lasts, its
pod's reason says for how long (refreshed every ``recheck_s``, ``RECHECK_S`` in the manager).

Events are core/v1 ``events`` about pods (field selector ``involvedObject.kind=Pod``):
the version the kubelet, Karpenter and the cluster autoscaler record with (client-go's
recorder: ``source.host`` names the node that pulls, ``count`` and ``lastTimestamp``
carry a repeated pull), served on every cluster; events.k8s.io/v1 shows the same objects
under other field names. Following them is best effort, as recording the manager's own
Events is: without ``events: list, watch`` (rbac/role.yaml) pulls count against the
timeout like any other wait, and the log says so once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from distributetrain.core import errors
from distributetrain.core.placement import podstate
from distributetrain.core.watching import startprogress
from distributetrain.core.clock import Clock
from distributetrain.core.settings import JobSettings
from distributetrain.core.watching.startbudget import StartBudget
from distributetrain.core.watching.startprogress import PodEvent, Stage, StageClocks
from distributetrain.kube import waits
from distributetrain.kube.api import KubeApi
from distributetrain.kube.informer import Informer, Satisfied
from distributetrain.manager.watching import podwaits
from distributetrain.manager.reporting.reporting import PodWaits

log = logging.getLogger(__name__)

RECHECK_S = 10.0  # a slow start's reason is refreshed this often, and new Events seen at the latest
SYNC_TIMEOUT_S = 10.0  # the Events' first list: beyond this, the wait goes on without them for now


class StartWatch:
    """Follows the Events of the job's pods while an attempt starts (``with StartWatch(...)``),
    and waits for it (``wait``)."""

    refusal_logged = False  # one log line per manager process, not per wait

    def __init__(self, kube: KubeApi, settings: JobSettings, clock: Clock, recheck_s: float = RECHECK_S):
        self.settings = settings
        self.clock = clock
        self.recheck_s = recheck_s
        self.events = Informer(kube, "Event", settings.namespace,
                               selectors={"field_selector": startprogress.POD_EVENTS_SELECTOR},
                               keep=self._keep, clock=clock)
        self.followed = False

    def _keep(self, event: dict) -> PodEvent | None:
        # Only this job's pods' Events, and only what a slow start is read from.
        found = startprogress.pod_event(event)
        return found if found is not None and found.pod.startswith(f"{self.settings.job_name}-") else None

    def __enter__(self) -> StartWatch:
        self.events.__enter__()
        try:
            synced = self.events.wait_until(lambda _: True, self.clock.monotonic() + SYNC_TIMEOUT_S)
            self.followed = isinstance(synced, Satisfied)
        except errors.DistributeTrainError as e:
            self._refused(e)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.events.__exit__(*exc_info)

    def _refused(self, error: errors.DistributeTrainError) -> None:
        if not StartWatch.refusal_logged:
            log.warning("job %s: cannot follow the Events of its pods (%s); image pulls and waits for new nodes count "
                        "against --worker-ready-timeout (rbac/role.yaml grants events list and watch)",
                        self.settings.job_name, error)
            StartWatch.refusal_logged = True
        self.followed = False

    def pod_events(self) -> list[PodEvent]:
        if self.events.failure is not None:
            if self.followed:
                self._refused(self.events.failure)
            return []
        with self.events.changed:
            return list(self.events.store.values())

    def slow_starts(self, clocks: StageClocks, view: Mapping[str, dict], waiting: list[str],
                    now: float) -> dict[str, tuple[Stage, float]]:
        """The ``waiting`` pods in a slow start now (pulling, awaiting a node), each since when."""
        events = self.pod_events()
        return clocks.update({name: startprogress.stage(view[name], events) for name in waiting}, now)

    def wait(self, pods: Informer, judge: podwaits.Judge, expected: list[str], hard_deadline: float,
             pod_waits: PodWaits) -> podwaits.Outcome:
        """``judge``'s outcome on the job's pods, or ``TimedOut`` once the start's budget ran
        out (``startbudget``: the timeout, a slow start's bound) or ``hard_deadline`` passed;
        ``pod_waits`` shows each slow start while it lasts."""
        budget = StartBudget.starting(self.settings, self.clock.monotonic())
        clocks = StageClocks()
        slow: dict[str, tuple[Stage, float]] = {}

        def account_then_judge(view: Mapping[str, dict]) -> podwaits.Outcome | None:
            nonlocal slow
            now = self.clock.monotonic()
            waiting = [name for name in expected if name in view and not podstate.is_ready(view[name])]
            slow = self.slow_starts(clocks, view, waiting, now)
            budget.observe(now, waiting, slow)
            pod_waits.observe(view, slow, now)
            return judge(view)

        while True:
            now = self.clock.monotonic()
            wake = min(hard_deadline, now + self.recheck_s, budget.timeout_at(now), budget.stage_ends_at(slow))
            result = waits.judged(pods, account_then_judge, wake)
            view = result.pods
            # A wake with no change of the pods: time went on, Events may have come.
            outcome = result.outcome if isinstance(result, waits.Judged) else account_then_judge(view)
            if outcome is not None:
                return outcome
            now = self.clock.monotonic()
            if now >= hard_deadline or budget.timed_out(now) or budget.overdue(now, slow):
                reasons = podwaits.pending_reasons(view, expected)
                return podwaits.TimedOut({**reasons, **{pod: startprogress.reason(stage, since, now)
                                                     for pod, (stage, since) in slow.items() if pod in reasons}})
