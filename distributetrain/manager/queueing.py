"""Jobs submitted with ``--queue``: each attempt waits in a Kueue queue as one pod group.

Kueue admits the group all or nothing against the LocalQueue's ClusterQueue quota
(``core.podgroup``). So the attempt's pods are created in one burst, unpinned and gated by
the job, and the job is Queued while Kueue holds its own gates on them. Once they are
admitted, the pods are placed from the inventory at that moment (a plan made before
hours in a queue is stale), under the placement Lease like every plan (``booking``):
each pinned by its node's name, then un-gated, so the scheduler binds it.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from distributetrain.core import errors, exitcodes, inventory, manifests, placement, podgroup, record, topology
from distributetrain.core.placement import Plan, format_plan
from distributetrain.core.settings import JobSettings
from distributetrain.core.sshkeys import JobKeys
from distributetrain.kube import events, waits
from distributetrain.kube.client import Kube
from distributetrain.manager import booking, isolation
from distributetrain.manager.freegpus import FreeGpuWatch
from distributetrain.manager.kinds import ElasticJob, StaticJob
from distributetrain.manager.queuepositions import QueuePositions
from distributetrain.manager.run import Run

log = logging.getLogger(__name__)

GROUP_TOKEN_BYTES = 2  # podgroup.group_name's token: 4 hex characters


@dataclass(frozen=True)
class Admitted:
    pass


def shares(ledger: inventory.GpuLedger, num_gpus: int, kind: StaticJob | ElasticJob) -> list[int]:
    """The pods' GPU counts, fixed at creation (a pod's requests never change): planned on
    the GPUs free now for the job's pods if they fit, else on what each candidate node
    could give them with nothing else on it (what the cluster gives the job once the
    queue ahead of it has drained): its GPUs, as far as its CPU, memory and GPU sharing allow."""
    try:
        plan = kind.plan(ledger.free(), num_gpus, ledger.paths)
    except placement.InsufficientGPUs:
        plan = kind.plan(ledger.idle(), num_gpus, ledger.paths)
    return [share for _, share in plan]


def admission(pods_of_group: list[str]) -> waits.Judge:
    """Admitted once Kueue's gates are gone from every pod; lost when one ends or vanishes
    first (Kueue deletes a preempted group's pods)."""

    def judge(pods: Mapping[str, dict]) -> waits.Outcome | Admitted | None:
        for name in pods_of_group:
            if lost := waits.lost(name, pods.get(name)):
                return lost
        return Admitted() if all(podgroup.is_admitted(pods[name]) for name in pods_of_group) else None

    return judge


def check_queue(kube: Kube, settings: JobSettings) -> None:
    """Bad input, before anything is created: a queue that does not exist, or a request
    its ClusterQueue could never admit (under StrictFIFO it would block every job behind
    it for ever)."""
    local = kube.read_custom(podgroup.KUEUE_GROUP, podgroup.KUEUE_VERSION, "localqueues", settings.namespace,
                             settings.queue)
    if local is None:
        raise errors.UsageError("--queue", f"no LocalQueue {settings.queue!r} in namespace {settings.namespace!r}")
    cluster_queue_name = (local.get("spec") or {}).get("clusterQueue", "")
    try:
        cluster_queue = kube.read_custom(podgroup.KUEUE_GROUP, podgroup.KUEUE_VERSION, "clusterqueues", None,
                                         cluster_queue_name)
    except errors.Forbidden as e:  # rbac/kueue/clusterrole.yaml not applied: queue it unchecked
        log.warning("job %s: cannot read ClusterQueue %s (%s); its quota is not checked", settings.job_name,
                    cluster_queue_name, e)
        cluster_queue = None
    quota = podgroup.gpu_quota(cluster_queue or {}, settings.gpu_resource)
    if quota is not None and settings.num_gpus > quota:
        raise errors.UsageError("--num-gpus", f"requested {settings.num_gpus} GPUs but queue {settings.queue}'s "
                                              f"ClusterQueue {cluster_queue_name} admits {quota} at most")


class QueuedPlacement:
    """The attempt's GPUs through a Kueue queue: create the group, wait, then place it."""

    def __init__(self, kube: Kube, run: Run, kind: StaticJob | ElasticJob):
        self.kube = kube
        self.run = run
        self.kind = kind

    def place(self) -> Plan:
        settings = self.run.settings
        check_queue(self.kube, settings)
        ledger = booking.take_inventory(self.kube, settings, shared=True, clock=self.run.clock)
        booking.check_request(ledger, settings)
        wanted = shares(ledger, settings.num_gpus, self.kind)
        return self.resume(wanted, self._create(wanted))

    def resume(self, wanted: list[int], group: str) -> Plan:
        """Wait for the attempt's group `group` (pods of `wanted` GPUs, workers first, the
        chief last) to be admitted, then place it: after `place` created it, or for a
        manager restarted while it was queued."""
        attempt = self.run.attempt
        pods = [*attempt.workers(len(wanted) - 1), attempt.chief]
        with QueuePositions(self.kube, self.run.reporter, workload=group):  # a group's Workload is named so
            self._wait_for_admission(pods)
        return self._pin(pods, wanted)

    def _create(self, wanted: list[int]) -> str:
        settings, attempt = self.run.settings, self.run.attempt
        group = podgroup.group_name(settings.job_name, attempt.number, secrets.token_hex(GROUP_TOKEN_BYTES))
        secret, *pods = podgroup.queued_attempt(settings, wanted, JobKeys.generate(settings.job_name), attempt.number,
                                                group)
        self.kube.create_owned(secret)
        isolation.isolate(self.kube, settings)
        self.kube.create_all_owned(pods)
        self.run.reporter.events.record(
            events.QUEUED, f"{settings.num_gpus} GPUs as one workload of {len(pods)} pods "
                           f"({', '.join(map(str, wanted))} GPUs) in queue {settings.queue}")
        self.run.reporter.phase(record.QUEUED)
        return group

    def _wait_for_admission(self, pods: list[str]) -> None:
        settings = self.run.settings
        outcome, _ = waits.watch_until(self.kube, settings.namespace, settings.selector, admission(pods),
                                       self.run.deadline, self.run.clock)
        if isinstance(outcome, waits.PodLost):
            raise outcome.error(" while queued")
        if outcome is None:
            raise errors.JobFailed(f"not admitted by queue {settings.queue} within --active-deadline "
                                   f"{settings.active_deadline_s:.0f}s", exitcodes.TIMED_OUT)
        log.info("job %s: admitted by queue %s", settings.job_name, settings.queue)

    def _pin(self, pods: list[str], wanted: list[int]) -> Plan:
        """Nodes for the admitted pods, booked as every plan is (``booking``). Short of
        GPUs, the free GPUs are followed (``FreeGpuWatch``) and booked again only when they
        could hold the shares: no Lease is taken, nothing listed, while nothing changes."""
        settings, clock = self.run.settings, self.run.clock
        give_up_at = min(clock.monotonic() + settings.worker_ready_timeout_s, self.run.deadline)
        domains = ""  # with --topology: the network domains of the nodes chosen

        def choose(ledger: inventory.GpuLedger) -> Plan:
            nonlocal domains
            free = ledger.free()
            # The tightest network domain that holds the shares, as the planner would choose it.
            nodes = topology.assign(wanted, free, ledger.paths, settings.topology)
            if nodes is None:
                raise placement.InsufficientGPUs(sum(wanted), sum(free.values()))
            domains = topology.describe(list(zip(nodes, wanted)), ledger.paths, settings.topology)
            return list(zip(nodes, wanted))

        with contextlib.ExitStack() as waiting:
            watch: FreeGpuWatch | None = None  # from the first shortage on
            while True:
                seen = watch.generation if watch else 0
                booked = booking.book(self.kube, settings, choose, lambda plan: self._place_pods(pods, plan),
                                      give_up_at, lambda: watch is None or watch.fits() is not False, clock)
                if isinstance(booked, list):
                    self._planned(booked, domains)
                    return booked
                if clock.monotonic() >= give_up_at:
                    raise errors.JobFailed(f"admitted by queue {settings.queue}, but no nodes hold its pods now: "
                                           f"{booked}", exitcodes.INSUFFICIENT_GPUS)
                if watch is None:
                    watch = waiting.enter_context(FreeGpuWatch(
                        self.kube, settings, clock=clock, fits=lambda free: podgroup.assign(wanted, free) is not None))
                watch.wait_until_fits(seen, give_up_at)

    def _planned(self, plan: Plan, domains: str) -> None:
        settings = self.run.settings
        self.run.reporter.planned(plan, domains)
        in_domains = f" in {domains}" if domains else ""
        self.run.reporter.events.record(events.PLANNED, f"admitted by queue {settings.queue}; "
                                                        f"{format_plan(plan)}{in_domains} (the chief's share last)")

    def _place_pods(self, pods: list[str], plan: Plan) -> None:
        namespace = self.run.settings.namespace
        for name, (node, _) in zip(pods, plan):
            placed = self.kube.patch_pod(namespace, name, podgroup.pin_patch(node))
            self.kube.patch_pod(namespace, name, podgroup.ungate_patch(placed))
