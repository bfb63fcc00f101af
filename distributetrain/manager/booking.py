"""Booking GPUs: plan and create a job's pods under the placement Lease.

Every plan the job makes is made here: an attempt's placement (``pretraining``, first
start and restarts alike) and an elastic job's replacements (``elastic``). Under the one
cluster-wide Lease (``kube.lock``) the inventory is listed afresh, so every manager's
pods count as used, this job's own included; the plan is chosen from what is free, and
its pods are created before the Lease is let go. So no GPU is ever booked twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from distributetrain.core import errors, inventory, names, placement, quantity, scaleup, topology
from distributetrain.core.clock import REAL_CLOCK, Clock
from distributetrain.core.placement import Plan
from distributetrain.core.podfit import SHARED, JobFit
from distributetrain.core.podrequests import CPU, MEMORY
from distributetrain.core.settings import JobSettings
from distributetrain.kube.client import Kube
from distributetrain.kube.lock import LOCK_TIMEOUT_S, PlacementLock

# What a booking plans from the free GPUs per node: raises ``InsufficientGPUs`` when
# nothing it would accept fits, ``UsageError`` when nothing ever could.
Choose = Callable[[inventory.GpuLedger], Plan]


@dataclass(frozen=True)
class Short:
    """No plan fits the free GPUs now."""

    shortage: placement.InsufficientGPUs
    ledger: inventory.GpuLedger

    def __str__(self) -> str:
        return f"{self.shortage}; unavailable: {self.ledger.unavailable()}"


def take_inventory(kube: Kube, settings: JobSettings) -> tuple[inventory.GpuLedger, str]:
    """GPUs free per candidate node for the job's pods, and the pod list's resourceVersion
    (to watch from)."""
    ledger = _job_ledger(settings)
    for page, _ in kube.list_pages("nodes"):
        _add_nodes(ledger, page, settings)
    version = kube.each_pod_request(ledger.add_pod, ledger.forget_pods, field_selector=inventory.ACTIVE_PODS_SELECTOR)
    return ledger, version


def _job_ledger(settings: JobSettings) -> inventory.GpuLedger:
    """No node yet: the job's GPU resource, what its pods need besides GPUs, its --topology's levels."""
    return inventory.GpuLedger(settings.gpu_resource, fit=JobFit.of_job(settings), levels=settings.topology)


def _add_nodes(ledger: inventory.GpuLedger, nodes: Iterable[Mapping], settings: JobSettings) -> None:
    selector = settings.candidate_selector  # --node-selector's labels and the RuntimeClass's
    for node in nodes:
        ledger.add_node(node, settings.candidate_tolerations, selector)


def check_nodes(nodes: Iterable[Mapping], settings: JobSettings) -> None:
    """``check_request`` on the nodes alone, as the CLI runs it with the user's credentials
    before it creates anything: no pod ever makes a request bad input, so the nodes say
    all the manager would say."""
    ledger = _job_ledger(settings)
    _add_nodes(ledger, nodes, settings)
    check_request(ledger, settings)


def check_request(ledger: inventory.GpuLedger, settings: JobSettings) -> None:
    """Requests no cluster state could ever satisfy are bad input, not a wait. A job that
    makes the cluster grow (``scaleup``) is bounded by no node that runs now: a cluster
    scaled to zero has no GPU node at all."""
    if scaleup.allowed(settings):
        return
    if not ledger.advertised:
        raise errors.UsageError("--gpu-resource", f"no node in the cluster advertises {settings.gpu_resource!r}")
    # Cordoned, NotReady or tainted nodes may come back (--wait-for-gpus waits for them):
    # only more GPUs than every node the selector allows advertises is never satisfiable,
    # or more than the job's pods could take there with nothing else on those nodes.
    where = "the nodes matching --node-selector" if settings.node_selector else "the cluster's nodes"
    if settings.num_gpus > ledger.selectable:
        raise errors.UsageError(
            "--num-gpus", f"requested {settings.num_gpus} GPUs but {where} advertise {ledger.selectable} in all")
    most, limit = ledger.most_for_job()
    if settings.num_gpus > most:
        flag, why = _held_back_by(limit, settings)
        raise errors.UsageError(flag, f"requested {settings.num_gpus} GPUs but the job's pods, one per node, fit "
                                      f"{most} of the {ledger.selectable} GPUs {where} advertise: {why}")
    _check_required_domain(ledger, settings, where)


def _check_required_domain(ledger: inventory.GpuLedger, settings: JobSettings, where: str) -> None:
    """A required level (``--topology LEVEL!``) none of whose domains could ever hold the job."""
    idle = {name: ledger.when_idle(part)[0] for name, part in ledger.selected.items()}
    held = topology.most_in_one_domain(idle, ledger.paths, settings.topology)
    if held is not None and settings.num_gpus > held[0]:
        most, level = held
        raise errors.UsageError("--topology", f"requested {settings.num_gpus} GPUs but one {level.name} of {where} "
                                              f"holds {most} of the job's GPUs at most ({level} is required)")


def _held_back_by(limit: str | None, settings: JobSettings) -> tuple[str, str]:
    """The flag to change when ``limit`` keeps the job off GPUs the cluster has, and why."""
    if limit == CPU:
        per_gpu = quantity.format_cpu(settings.cpu_per_gpu_m)
        return "--cpu-per-gpu", f"their allocatable CPU holds too few pods of {per_gpu} CPU per GPU"
    if limit == MEMORY:
        per_gpu = quantity.format_memory(settings.memory_per_gpu_bytes)
        return "--memory-per-gpu", f"their allocatable memory holds too few pods of {per_gpu} per GPU"
    if limit == SHARED:
        return "--allow-shared-gpus", "their GPUs are shared or MIG slices: one rank of the job per node"
    return "--num-gpus", f"their allocatable {limit} holds too few of the job's pods"


def plan_or_grow(plan: Callable[[Mapping[str, int], int], Plan], free: Mapping[str, int],
                 settings: JobSettings, may_wait: bool = True) -> Plan:
    """``plan`` on the free GPUs; short of them, where the job makes the cluster grow and
    ``may_wait`` for the nodes still, the rest on nodes the cluster adds (``scaleup``), so
    the booking creates their pods at once."""
    try:
        return plan(free, settings.num_gpus)
    except placement.InsufficientGPUs:
        if not (scaleup.allowed(settings) and may_wait):
            raise
        return scaleup.plan(free, settings.num_gpus, settings.scale_up_node_gpus)


def book(kube: Kube, settings: JobSettings, choose: Choose, create: Callable[[Plan], None],
         wait_until: float = -math.inf, still_wanted: Callable[[], bool] = lambda: True,
         clock: Clock = REAL_CLOCK) -> Plan | Short | None:
    """Under the Lease: a fresh inventory, ``choose``'s plan, then ``create(plan)``.

    A busy Lease is tried for LOCK_TIMEOUT_S, or until ``wait_until`` (of ``clock``) if
    later. ``still_wanted`` is asked once the Lease is held: False (the GPUs were taken
    while this job waited for it) returns None without listing anything.
    """
    holder = f"{settings.namespace}/{settings.job_name}"
    with PlacementLock(kube, settings.lease_namespace, holder, LOCK_TIMEOUT_S, names.LOCK_LEASE_NAME,
                       clock=clock, wait_until=wait_until):
        if not still_wanted():
            return None
        ledger, _ = take_inventory(kube, settings)
        try:
            plan = choose(ledger)
        except placement.InsufficientGPUs as shortage:
            return Short(shortage, ledger)
        create(plan)
        return plan
