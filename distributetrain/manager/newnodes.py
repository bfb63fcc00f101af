"""Waiting for the nodes the cluster adds for an attempt's scale-up pods (``core.scaleup``).

An attempt whose plan has shares on new nodes has created Pending pods that no running
node holds: the cluster's autoscaler adds a node for each, which takes minutes (a cloud
GPU node boots, joins, pulls). That is the job waiting for GPUs, so it is bounded by
``--wait-for-gpus``, not by ``--worker-ready-timeout``, whose clock then starts on pods
that have their nodes. Once every pod is bound (to a new node, or to a running one whose
GPUs freed up meanwhile) the plan is recorded with the nodes' names and the attempt
starts as any other. A job that gives up exits 69 with what its pods last said (the
scheduler's message: no node fits); its teardown deletes every pod, so the autoscaler adds
nothing more, and the nodes it added for them empty out and go back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from distributetrain.core import errors, exitcodes, podstate, scaleup
from distributetrain.core.placement import Plan, format_plan
from distributetrain.kube import events, waits
from distributetrain.kube.client import Kube
from distributetrain.kube.informer import Informer
from distributetrain.manager.reporting import PodWaits
from distributetrain.manager.run import Run

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodesAdded:
    """Every pod of the attempt bound to a node: the plan with each share's node named."""

    plan: Plan


def all_bound(chief: str, workers: list[str], shares: list[int]) -> waits.Judge:
    """Done when every pod of the attempt has its node; lost when one ends or vanishes first."""

    def judge(pods: Mapping[str, dict]) -> NodesAdded | waits.PodLost | None:
        names = [*workers, chief]
        for name in names:
            if found := waits.lost(name, pods.get(name)):
                return found
        if all(podstate.node(pods[name]) for name in names):
            return NodesAdded([(podstate.node(pods[name]), share) for name, share in zip(names, shares)])
        return None

    return judge


def _reporting(pod_waits: PodWaits, judge: waits.Judge) -> waits.Judge:
    """``judge``, each view of the pods first reported: why each pod still waits."""

    def observe_then_judge(pods):
        pod_waits.observe(pods)
        return judge(pods)

    return observe_then_judge


def wait_for_new_nodes(kube: Kube, run: Run, plan: Plan, chief: str, workers: list[str]) -> Plan:
    """The attempt's plan once the cluster has added nodes for its scale-up pods; raise
    ``JobFailed`` (69) when ``--wait-for-gpus`` runs out first, ``PodLost`` when a pod is lost."""
    settings = run.settings
    added = scaleup.new_node_shares(plan)
    log.info("job %s: waiting up to %.0fs (--wait-for-gpus) for the cluster to add %d nodes for %s",
             settings.job_name, max(0.0, run.gpus_until - run.clock.monotonic()), added, format_plan(plan))
    run.reporter.phase("WaitingForNodes")
    pods = waits.job_pods(kube, settings.namespace, settings.selector, run.clock)
    pod_waits = PodWaits(run.reporter, [*workers, chief])  # why each pod waits, on the manager pod
    try:
        outcome = waits.watch_job(pods, _reporting(pod_waits, all_bound(chief, workers, [share for _, share in plan])),
                                  min(run.gpus_until, run.deadline), [*workers, chief])
    finally:
        pod_waits.done()
    if isinstance(outcome, waits.PodLost):
        raise outcome.error(" while the cluster added nodes")
    if isinstance(outcome, waits.TimedOut):
        bound = ("--active-deadline" if run.deadline < run.gpus_until
                 else f"--wait-for-gpus ({settings.wait_for_gpus_s:.0f}s)")
        raise errors.JobFailed(f"the cluster did not add the {added} nodes the job's pods wait for within {bound}: "
                               f"{_why(run, pods, outcome)}", exitcodes.INSUFFICIENT_GPUS)
    run.reporter.events.record(events.NODES_ADDED, f"the job's pods have their nodes: {format_plan(outcome.plan)}")
    run.reporter.planned(outcome.plan)
    return outcome.plan


def _why(run: Run, pods: Informer, late: waits.TimedOut) -> str:
    """Each pod's own reason, and what the cluster's autoscaler said of it, if anything
    (Karpenter's NodePool limits, no instance type that fits): passed through as said."""
    uids = {name: (pod.get("metadata") or {}).get("uid", "") for name, pod in pods.store.items()
            if name in late.waiting_for and not podstate.node(pod)}
    said = run.reporter.events.autoscaler_says(run.settings.namespace, uids)
    return "; ".join(f"{pod}: {why}" + (f" (autoscaler: {said[pod]})" if pod in said else "")
                     for pod, why in late.waiting_for.items())
