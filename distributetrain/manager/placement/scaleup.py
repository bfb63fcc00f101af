"""Waiting for the nodes the cluster adds for an attempt's scale-up pods (``core.placement.scaleup``).

An attempt whose plan has shares on new nodes has created Pending pods that no running
node holds: the cluster's autoscaler adds a node for each, which takes minutes (a cloud
GPU node boots, joins, pulls). That is the job waiting for GPUs, so it is bounded by
``--wait-for-gpus``, not by ``--worker-ready-timeout``, whose clock then starts on pods
that have their nodes. Once every pod is bound (to a new node, or to a running one whose
GPUs freed up meanwhile) the plan is recorded with the nodes' names and the attempt
starts as any other.

Meanwhile the autoscaler's Events about the pods are followed (``startwatch``'s Events,
read by ``startprogress``), so the wait ends as soon as it is known to be vain:
- a final refusal (no node the autoscaler can add would ever hold a pod: its
  requirements, taints, instance types): the job fails at once, 69, in its words;
- a refusal for now (a NodePool or node group at its limits, a cloud out of capacity),
  or no autoscaler answering within ``no_autoscaler_window_s`` of the pods' being found
  unschedulable: ``NodesNotComing``, and the job's loop releases every pod (its shares on
  running nodes would hold their GPUs idle meanwhile) and waits for free GPUs as a job
  without ``--scale-up-node-gpus`` does, for the rest of ``--wait-for-gpus``.
A job that gives up exits 69 with what its pods last said, and what the autoscaler said
of them; its teardown deletes every pod at once, so the autoscaler adds nothing more, and
the nodes it added for them empty out and go back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from distributetrain.core import errors, exitcodes
from distributetrain.core.placement import podstate, scaleup
from distributetrain.core.watching import startprogress
from distributetrain.core.placement.placement import Plan, format_plan
from distributetrain.kube import waits
from distributetrain.kube.client import Kube
from distributetrain.kube.informer import Informer
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.watching import podwaits
from distributetrain.manager.reporting.reporting import PodWaits
from distributetrain.manager.processstate import ProcessState
from distributetrain.manager.watching.startwatch import RECHECK_S, StartWatch

log = logging.getLogger(__name__)

# Karpenter answers a pending pod within its batch window (1-10 s) and the cluster
# autoscaler within its scan interval (10 s): with neither answering for two minutes
# after the scheduler found no node, no autoscaler acts for the job's pods.
NO_AUTOSCALER_WINDOW_S = 120.0


@dataclass(frozen=True)
class NodesAdded:
    """Every pod of the attempt bound to a node: the plan with each share's node named."""

    plan: Plan


@dataclass(frozen=True)
class Refused:
    """The autoscaler's latest word about some of the attempt's pods: no node for them."""

    refusals: dict[str, startprogress.Refusal]  # by pod

    @property
    def final(self) -> bool:
        return any(refusal.final for refusal in self.refusals.values())

    def __str__(self) -> str:
        shown = {pod: r for pod, r in self.refusals.items() if r.final} if self.final else self.refusals
        return "; ".join(f"{pod}: {refusal.words}" for pod, refusal in shown.items())


@dataclass(frozen=True)
class NoAutoscaler:
    """No autoscaler said anything of the attempt's pods within ``window_s``."""

    window_s: float


class NodesNotComing(errors.DistributeTrainError):
    """The cluster adds no node for the attempt's pods for now: the job stops making it grow."""

    def __init__(self, cause: str):
        self.cause = cause
        super().__init__(cause)


def all_bound(chief: str, workers: list[str], shares: list[int]) -> podwaits.Judge:
    """Done when every pod of the attempt has its node; lost when one ends or vanishes first."""

    def judge(pods: Mapping[str, dict]) -> NodesAdded | podwaits.PodLost | None:
        names = [*workers, chief]
        for name in names:
            if found := podwaits.lost(name, pods.get(name)):
                return found
        if all(podstate.node(pods[name]) for name in names):
            return NodesAdded([(podstate.node(pods[name]), share) for name, share in zip(names, shares)])
        return None

    return judge


class _Answers:
    """What the autoscaler said of the attempt's pods (``StartWatch``'s Events), judged
    beside them: a refusal, or no answer at all long after the pods were found unschedulable."""

    def __init__(self, watch: StartWatch, state: ProcessState, names: list[str], window_s: float):
        self.watch = watch
        self.clock = state.clock
        self.names = names
        self.window_s = window_s
        self.unschedulable_since: float | None = None

    def judge(self, pods: Mapping[str, dict]) -> Refused | NoAutoscaler | None:
        waiting = [pods[name] for name in self.names if name in pods and not podstate.node(pods[name])]
        said = self.watch.pod_events()
        refusals = {pod["metadata"]["name"]: found for pod in waiting
                    if (found := startprogress.refusal(pod, said)) is not None}
        if refusals:
            return Refused(refusals)
        if self.unschedulable_since is None and any(map(_unschedulable, waiting)):
            self.unschedulable_since = self.clock.monotonic()
        answered = any(startprogress.autoscaler_said(pods[name], said) is not None
                       for name in self.names if name in pods)
        if (self.watch.followed and not answered and self.unschedulable_since is not None
                and self.clock.monotonic() - self.unschedulable_since >= self.window_s):
            return NoAutoscaler(self.window_s)
        return None


def _unschedulable(pod: Mapping) -> bool:
    """The scheduler found no node for the pod (its PodScheduled condition)."""
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               for c in (pod.get("status") or {}).get("conditions") or ())


def wait_for_new_nodes(kube: Kube, state: ProcessState, plan: Plan, chief: str, workers: list[str],
                       recheck_s: float = RECHECK_S, no_autoscaler_window_s: float = NO_AUTOSCALER_WINDOW_S) -> Plan:
    """The attempt's plan once the cluster has added nodes for its scale-up pods; raise
    ``JobFailed`` (69) when ``--wait-for-gpus`` runs out first or the autoscaler refuses
    for good, ``NodesNotComing`` when it refuses for now or none answers within
    ``no_autoscaler_window_s``, ``AttemptLost`` when a pod is lost. The pods are judged
    again every ``recheck_s`` without a change of theirs (the autoscaler's Events come meanwhile)."""
    settings = state.settings
    added = scaleup.new_node_shares(plan)
    log.info("job %s: waiting up to %.0fs (--wait-for-gpus) for the cluster to add %d nodes for %s",
             settings.job_name, max(0.0, state.gpus_until - state.clock.monotonic()), added, format_plan(plan))
    state.reporter.phase("WaitingForNodes")
    names = [*workers, chief]
    pod_waits = PodWaits(state.reporter, names, state.clock)  # why each pod waits, on the manager pod
    bound = all_bound(chief, workers, [share for _, share in plan])
    try:
        with StartWatch(kube, settings, state.clock, recheck_s) as watch:
            answers = _Answers(watch, state, names, no_autoscaler_window_s)

            def judge(view: Mapping[str, dict]):
                pod_waits.observe(view)
                return bound(view) or answers.judge(view)

            outcome, view = _watch(state.pods, judge, min(state.gpus_until, state.deadline), recheck_s, state, names)
            why = _why(watch, view, outcome) if isinstance(outcome, podwaits.TimedOut) else ""
    finally:
        pod_waits.done()
    return _outcome(state, outcome, added, why)


def _watch(pods: Informer, judge: podwaits.Judge, until: float, recheck_s: float, state: ProcessState,
           names: list[str]) -> tuple[podwaits.Outcome, Mapping[str, dict]]:
    """``judge``'s outcome, judged on every change of the pods and every ``recheck_s`` (the
    autoscaler's Events come meanwhile), or ``TimedOut`` at ``until``; and the last view."""
    while True:
        result = waits.judged(pods, judge, min(until, state.clock.monotonic() + recheck_s))
        view = result.pods
        # A wake with no change of the pods: time went on, Events may have come.
        outcome = result.outcome if isinstance(result, waits.Judged) else judge(view)
        if outcome is not None:
            return outcome, view
        if state.clock.monotonic() >= until:
            return podwaits.TimedOut(podwaits.pending_reasons(view, names)), view


def _outcome(state: ProcessState, outcome, added: int, why: str) -> Plan:
    settings = state.settings
    if isinstance(outcome, podwaits.PodLost):
        raise outcome.error(" while the cluster added nodes")
    if isinstance(outcome, Refused) and outcome.final:
        raise errors.JobFailed(f"the cluster's autoscaler adds no node that could hold the job's pods: {outcome}",
                               exitcodes.INSUFFICIENT_GPUS)
    if isinstance(outcome, Refused):
        raise NodesNotComing(f"the cluster's autoscaler adds no node for the job's pods for now: {outcome}")
    if isinstance(outcome, NoAutoscaler):
        note = (f"no autoscaler has answered for the job's pods within {outcome.window_s:.0f}s of the "
                "scheduler's finding no node for them")
        state.reporter.events.record(jobevents.WAITING_FOR_NODES, note)
        raise NodesNotComing(note)
    if isinstance(outcome, podwaits.TimedOut):
        bound = ("--active-deadline" if state.deadline < state.gpus_until
                 else f"--wait-for-gpus ({settings.wait_for_gpus_s:.0f}s)")
        raise errors.JobFailed(f"the cluster did not add the {added} nodes the job's pods wait for within {bound}: "
                               f"{why}", exitcodes.INSUFFICIENT_GPUS)
    state.reporter.events.record(jobevents.NODES_ADDED, f"the job's pods have their nodes: {format_plan(outcome.plan)}")
    state.reporter.planned(outcome.plan)
    return outcome.plan


def _why(watch: StartWatch, pods: Mapping[str, dict], late: podwaits.TimedOut) -> str:
    """Each pod's own reason, and what the cluster's autoscaler last said of it, if anything
    (Karpenter's NodePool limits, no instance type that fits; a node on its way): passed
    through as said."""
    said = watch.pod_events()

    def autoscaler(pod: str) -> str:
        words = startprogress.autoscaler_said(pods[pod], said) if pod in pods else None
        return f" (autoscaler: {words})" if words else ""

    return "; ".join(f"{pod}: {why}{autoscaler(pod)}" for pod, why in late.waiting_for.items())
