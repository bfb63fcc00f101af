"""Booking GPUs: plan and create a job's pods under the placement Lease.

Every plan the job makes is made here, through one wait (``placing``): an attempt's
placement (``directplacement``, first start and restarts alike), a queued attempt's nodes
(``queueing``) and an elastic job's replacements (``elastic``). What the Lease protects is the set of bookings: every job's
workers and chiefs (``names.BOOKINGS_SELECTOR``). So only they are read under it:

1. outside the Lease, the survey: the nodes, what every other pod of the cluster holds,
   and the bookings then (the long list of a large cluster, which no other manager
   waits on), after the booking journal's position (``bookingjournal``);
2. under the one cluster-wide Lease (``kube.lock``): the bookings made since the survey,
   from the journal, when every holder since wrote its entry; else a write to the
   manager's own pod (``fence``), then the bookings listed at that write's
   resourceVersion or later, so every pod an earlier holder created is among them (it
   created them before letting the Lease go, and this write came after taking it). The
   plan is chosen from the survey and the bookings, its pods are created, and the
   journal gets their entry before the Lease is let go.

So no GPU is ever booked twice (the proof: docs/architecture.md, "The placement Lease"
and "The booking journal"). A pod of another tenant that took GPUs after the survey is
the scheduler's to refuse, as for any pod: the plan then waits out --worker-ready-timeout
and plans again.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from distributetrain.core.placement import dracounting, inventory, placement, scaleup, topology
from distributetrain.core.placement.bookingjournal import BookingJournal, Closing
from distributetrain.core import errors, names, quantity
from distributetrain.core.beside import beside
from distributetrain.core.clock import Clock
from distributetrain.core.placement.gpusharing import SharedUnits
from distributetrain.core.placement.placement import Plan
from distributetrain.core.placement.podfit import SHARED, JobFit
from distributetrain.core.placement.podrequests import CPU, MEMORY
from distributetrain.core.settings import JobSettings
from distributetrain.core.placement.volumeclaims import JobClaims
from distributetrain.kube import dra, podwire
from distributetrain.kube.client import Kube
from distributetrain.kube.events import micro_time
from distributetrain.kube.lock import LOCK_TIMEOUT_S, PlacementLock
from distributetrain.manager.placement import clusterview, journal, turns, volumeclaims


log = logging.getLogger(__name__)

# What a booking plans from the free GPUs per node: raises ``InsufficientGPUs`` when
# nothing it would accept fits, ``UsageError`` when nothing ever could.
Choose = Callable[[inventory.GpuLedger], Plan]
# What a booking does with its plan: the pods that take its GPUs, as created (or pinned).
Create = Callable[[Plan], list[dict]]
MAX_SHARING_NAMED = 3  # ways GPUs are shared, in a refusal: a few say it, a long list drowns it


@dataclass(frozen=True)
class Short:
    """No plan fits the free GPUs now."""

    shortage: placement.InsufficientGPUs
    ledger: inventory.GpuLedger

    def __str__(self) -> str:
        return f"{self.shortage}; unavailable: {self.ledger.unavailable()}"


@dataclass(frozen=True)
class Surveyed:
    """A survey as a job reads it: its ledger (every node, every pod but the bookings), the
    bookings then, and the journal's position then (None: the bookings are listed under the Lease)."""

    ledger: inventory.GpuLedger
    bookings: list[dict]
    position: int | None

    def with_journal(self, found: BookingJournal) -> inventory.GpuLedger:
        """The ledger with the bookings then and those the journal holds since (a pod in
        both, as the journal has it: a queued pod pinned to its node since)."""
        ledger = self.ledger.copy()
        pods = {_key(pod): pod for pod in self.bookings}
        pods.update((_key(pod), pod) for pod in found.since(self.position))
        for pod in pods.values():
            ledger.add_pod(pod)
        return ledger


def _key(pod: Mapping) -> str:
    metadata = pod["metadata"]
    return metadata.get("uid") or f"{metadata.get('namespace')}/{metadata['name']}"


def survey(kube: Kube, settings: JobSettings, clock: Clock, shared_since: float | None = None,
           wait_until: float = -math.inf) -> Surveyed:
    """Outside the Lease: the nodes, and what every pod but the bookings holds; with
    ``shared_since`` (of ``clock.now``: when the booking began), from a survey taken for
    every manager since then (``clusterview``: a burst of starts lists the cluster once;
    another manager's survey waited for as the Lease is, ``lease_deadline``), else one of
    its own, taken now (a manager that waited for GPUs to free up must see them free)."""
    claims = volumeclaims.read_claims(kube, settings)  # they decide which nodes are candidates
    device_class = read_device_class(kube, settings)
    # DRA GPUs are in no shared survey (its managers ask for no DRA): a job of some class surveys alone.
    view = (clusterview.current(kube, settings, clock, lease_deadline(clock, wait_until), shared_since)
            if shared_since is not None and device_class is None
            else clusterview.take(kube, clock, settings.lease_namespace, dra_gpus=device_class is not None))
    ledger = view.ledger(_job_ledger(settings, claims, device_class), settings.candidate_tolerations,
                         settings.candidate_selector)
    return Surveyed(ledger, view.bookings, view.position)


def lease_deadline(clock: Clock, wait_until: float) -> float:
    """Until when a busy Lease (``clusterview``'s surveyor's too) is waited for: LOCK_TIMEOUT_S,
    or the end of the job's wait for GPUs if later (many managers' turns)."""
    return max(clock.monotonic() + LOCK_TIMEOUT_S, wait_until)


def read_device_class(kube: Kube, settings: JobSettings) -> dracounting.ClassSelector | None:
    """What selects the job's DRA GPUs (``--device-class``); None without it, or for a queued
    job: its pods' requests are fixed before any node is chosen, and Kueue admits them
    against quotas of extended resources (``queueing``)."""
    if not settings.device_class or settings.queue:
        return None
    found = dra.device_class(kube, settings.device_class)
    if found is None:
        raise errors.UsageError("--device-class", f"the cluster has no DeviceClass {settings.device_class!r} "
                                                  "(resource.k8s.io/v1; `kubectl get deviceclasses` lists them)")
    selector = dracounting.class_selector(found)
    if selector.unread:
        log.info("job %s: of DeviceClass %s, not applied when counting its devices: %s", settings.job_name,
                 selector.name, "; ".join(selector.unread))
    return selector


def fence(kube: Kube, settings: JobSettings, clock: Clock, labels: Mapping[str, str | None] = {}) -> str:
    """Under the Lease: a write to the manager's own pod (with ``labels``: out of the
    Lease's queue, ``turns``), whose resourceVersion is later than that of every pod an
    earlier holder created; "" outside a manager pod (the bookings are then read
    consistently, at the server's latest)."""
    if not settings.owner_uid:
        return ""
    metadata = {"annotations": {names.ANNOTATION_BOOKED_AT: micro_time(clock.now())},
                **({"labels": dict(labels)} if labels else {})}
    try:
        pod = kube.patch("Pod", settings.own_namespace, settings.job_name, {"metadata": metadata})
    except errors.NotFound:  # the manager pod is being deleted: its teardown follows
        return ""
    return pod["metadata"].get("resourceVersion", "")


def with_bookings(kube: Kube, surveyed: inventory.GpuLedger, version: str) -> inventory.GpuLedger:
    """The survey plus every booking there is at ``version`` or later."""
    ledger = surveyed.copy()

    def start_over() -> None:
        nonlocal ledger
        ledger = surveyed.copy()

    at = {"resource_version": version, "resource_version_match": "NotOlderThan"} if version else {}
    kube.each_pod_request(lambda pod: ledger.add_pod(pod), start_over, label_selector=names.BOOKINGS_SELECTOR,
                          field_selector=inventory.ACTIVE_PODS_SELECTOR, **at)
    return ledger


def take_inventory(kube: Kube, settings: JobSettings, clock: Clock, shared: bool = False) -> inventory.GpuLedger:
    """GPUs free per candidate node for the job's pods now: the survey and the bookings."""
    return with_bookings(kube, survey(kube, settings, clock, clock.now() if shared else None).ledger, "")


def _job_ledger(settings: JobSettings, claims: JobClaims | None = None,
                device_class: dracounting.ClassSelector | None = None) -> inventory.GpuLedger:
    """No node yet: the job's GPU resource, what its pods need besides GPUs, its --topology's
    levels, its claims (``volumeclaims``), its DeviceClass (``dracounting``)."""
    return inventory.GpuLedger(settings.gpu_resource, fit=JobFit.of_job(settings), levels=settings.topology,
                               volume_claims=claims, device_class=device_class)


def _add_nodes(ledger: inventory.GpuLedger, nodes: Iterable[Mapping], settings: JobSettings) -> None:
    selector = settings.candidate_selector  # --node-selector's labels and the RuntimeClass's
    for node in nodes:
        ledger.add_node(node, settings.candidate_tolerations, selector)


def check_nodes(nodes: Iterable[Mapping], settings: JobSettings, claims: JobClaims | None = None,
                dra_devices: Mapping[str, int] | None = None) -> None:
    """``check_request`` on the nodes (and the job's claims, and its DRA GPUs per node: the
    devices of its class, allocated or not) alone, as the CLI runs it with the user's
    credentials before it creates anything: no pod ever makes a request bad input, so they
    say all the manager would say."""
    ledger = _job_ledger(settings, claims)
    ledger.dra = dict(dra_devices or {})
    _add_nodes(ledger, nodes, settings)
    check_request(ledger, settings)


def check_request(ledger: inventory.GpuLedger, settings: JobSettings) -> None:
    """Requests no cluster state could ever satisfy are bad input, not a wait. A job that
    makes the cluster grow (``scaleup``) is bounded by no node that runs now: a cluster
    scaled to zero has no GPU node at all (unless a claim can be mounted on no new node).
    The job's claims (``volumeclaims``) bound it too: the nodes they can be mounted on, all
    its pods on one node (ReadWriteOnce), one pod (ReadWriteOncePod)."""
    _check_one_pod(ledger.volume_claims, settings)
    if scaleup.allowed(settings) and not (ledger.volume_claims and ledger.volume_claims.pinned):
        _check_one_node(ledger, settings, f"the cluster's nodes or a new node of --scale-up-node-gpus "
                                          f"{settings.scale_up_node_gpus}", settings.scale_up_node_gpus)
        return
    if not ledger.advertised:
        # A node pool scaled to zero grows only for pods that wait for its nodes.
        raise errors.UsageError("--gpu-resource", f"no node in the cluster advertises {settings.gpu_resource!r}; "
                                                  "where an autoscaler adds GPU nodes (a node pool scaled to zero), "
                                                  "--scale-up-node-gpus N with --wait-for-gpus makes it add them")
    # Cordoned, NotReady or tainted nodes may come back (--wait-for-gpus waits for them):
    # only more GPUs than every node the selector allows advertises is never satisfiable,
    # or more than the job's pods could take there with nothing else on those nodes.
    where = "the nodes matching --node-selector" if settings.node_selector else "the cluster's nodes"
    if settings.num_gpus > ledger.selectable:
        _check_mountable(ledger, settings, where)
        raise errors.UsageError(
            "--num-gpus", f"requested {settings.num_gpus} GPUs but {where} advertise {ledger.selectable} in all")
    most, limit = ledger.most_for_job()
    if settings.num_gpus > most:
        flag, why = _held_back_by(limit, settings, ledger)
        raise errors.UsageError(flag, f"requested {settings.num_gpus} GPUs but the job's pods, one per node, fit "
                                      f"{most} of the {ledger.selectable} GPUs {where} advertise: {why}")
    _check_one_node(ledger, settings, where)
    _check_required_domain(ledger, settings, where)


def _check_one_pod(claims: JobClaims | None, settings: JobSettings) -> None:
    """A ReadWriteOncePod claim: an elastic job's worker beside its chief could never mount it."""
    claim = claims.one_pod if claims else None
    if claim and settings.elastic:
        raise errors.UsageError("--pvc", f"claim {claim.name} is ReadWriteOncePod: one pod may mount it, and an "
                                         "elastic job (--elastic) runs a worker beside its chief; use a ReadWriteOnce "
                                         "or ReadWriteMany claim, or no --elastic")


def _check_mountable(ledger: inventory.GpuLedger, settings: JobSettings, where: str) -> None:
    """More GPUs than the nodes the claims can be mounted on advertise, but not than all of them."""
    left_out = sum(part.gpus for part in ledger.unmountable.values())
    if ledger.unmountable and settings.num_gpus <= ledger.selectable + left_out:
        why = Counter(part.unmountable for part in ledger.unmountable.values())
        raise errors.UsageError("--pvc", f"requested {settings.num_gpus} GPUs but of the {ledger.selectable + left_out}"
                                         f" GPUs {where} advertise, {ledger.selectable} are on nodes that can mount "
                                         "the job's claims: " + "; ".join(f"{count} nodes {text}"
                                                                          for text, count in sorted(why.items())))


def _check_one_node(ledger: inventory.GpuLedger, settings: JobSettings, where: str, new_node_gpus: int = 0) -> None:
    """A one-node claim (ReadWriteOnce, ReadWriteOncePod): the whole job on the largest node."""
    claim = ledger.volume_claims.one_node if ledger.volume_claims else None
    if claim is None:
        return
    most = max([new_node_gpus, *(ledger.when_idle(part)[0] for part in ledger.selected.values())])
    if settings.num_gpus > most:
        raise errors.UsageError("--pvc", f"requested {settings.num_gpus} GPUs but claim {claim.name} is {claim.mode}: "
                                         f"every pod of the job on one node, and one of {where} takes {most} of "
                                         "them at most")


def _check_required_domain(ledger: inventory.GpuLedger, settings: JobSettings, where: str) -> None:
    """A required level (``--topology LEVEL!``) none of whose domains could ever hold the job."""
    if not any(level.required for level in settings.topology):
        return  # no node read: 5,000 of them cost every manager of a burst, on the manager's CPU
    idle = {name: ledger.when_idle(part)[0] for name, part in ledger.selected.items()}
    held = topology.most_in_one_domain(idle, ledger.paths, settings.topology)
    if held is not None and settings.num_gpus > held[0]:
        most, level = held
        raise errors.UsageError("--topology", f"requested {settings.num_gpus} GPUs but one {level.name} of {where} "
                                              f"holds {most} of the job's GPUs at most ({level} is required)")


def _held_back_by(limit: str | None, settings: JobSettings, ledger: inventory.GpuLedger) -> tuple[str, str]:
    """The flag to change when ``limit`` keeps the job off GPUs the cluster has, and why."""
    if limit == CPU:
        per_gpu = quantity.format_cpu(settings.cpu_per_gpu_m)
        return "--cpu-per-gpu", f"their allocatable CPU holds too few pods of {per_gpu} CPU per GPU"
    if limit == MEMORY:
        per_gpu = quantity.format_memory(settings.memory_per_gpu_bytes)
        return "--memory-per-gpu", f"their allocatable memory holds too few pods of {per_gpu} per GPU"
    if limit == SHARED:
        return _held_back_by_sharing(ledger.sharing(), settings)
    return "--num-gpus", f"their allocatable {limit} holds too few of the job's pods"


def _held_back_by_sharing(sharing: list[SharedUnits], settings: JobSettings) -> tuple[str, str]:
    """In the platforms' words (their labels), how the GPUs that take one rank are shared;
    the flag that lifts the rule, unless their platforms give a container one unit at most."""
    capping = [shared for shared in sharing if shared.one_per_container or not settings.allow_shared_gpus]
    shown = [shared.why for shared in capping[:MAX_SHARING_NAMED]]
    more = f" (and {len(capping) - MAX_SHARING_NAMED} more)" if len(capping) > MAX_SHARING_NAMED else ""
    why = f"they are {'; '.join(shown)}{more}: one rank of the job per node"
    if all(shared.one_per_container for shared in capping):
        return "--num-gpus", f"{why} (their platform gives a container one unit at most)"
    return "--allow-shared-gpus", why


def plan_or_grow(plan: Callable[[Mapping[str, int], int], Plan], free: Mapping[str, int],
                 settings: JobSettings, may_wait: bool = True, claims: JobClaims | None = None,
                 paths: Mapping[str, topology.Path] = {}) -> Plan:
    """``plan`` on the free GPUs; short of them, where the job makes the cluster grow and
    ``may_wait`` for the nodes still, the rest on nodes the cluster adds (``scaleup``, the
    running shares inside one domain of a required ``--topology`` level: ``paths``), so
    the booking creates their pods at once. Its ``claims`` may keep it off new nodes (a
    claim mounted on a running node, or only ever on named ones), or put it on one new node."""
    try:
        return plan(free, settings.num_gpus)
    except placement.InsufficientGPUs:
        if not (scaleup.allowed(settings) and may_wait and (claims is None or claims.new_nodes_may_mount())):
            raise
        grown = scaleup.plan(free, settings.num_gpus, settings.scale_up_node_gpus, paths, settings.topology)
        if claims and claims.one_node and len(grown) > 1:
            raise
        return grown


def book(kube: Kube, settings: JobSettings, choose: Choose, create: Create, clock: Clock,
         wait_until: float = -math.inf, still_wanted: Callable[[], bool] = lambda: True,
         shared_since: float | None = None,
         surveyed_hook: Callable[[inventory.GpuLedger], None] = lambda ledger: None) -> Plan | Short | None:
    """The survey, then under the Lease: the bookings, ``choose``'s plan, ``create(plan)``,
    and the journal's entry for what it created.

    ``surveyed_hook(survey)`` runs before the Lease is taken: what no other manager waits
    on (checking the request against the survey, objects of the job's own).
    A busy Lease is tried for LOCK_TIMEOUT_S, or until ``wait_until`` (of ``clock``) if
    later. ``still_wanted`` is asked once the Lease is held: False (the GPUs were taken
    while this job waited for it) returns None without reading anything more.
    ``shared_since``: see ``survey``.
    """
    surveyed = survey(kube, settings, clock, shared_since, wait_until)
    surveyed_hook(surveyed.ledger)
    queue = turns.Turns(kube, settings, clock)  # first come, first served: one update a hand-off
    try:
        with PlacementLock(kube, settings.lease_namespace, queue.identity, LOCK_TIMEOUT_S, names.LOCK_LEASE_NAME,
                           clock=clock, wait_until=wait_until, on_busy=queue.join, successor=queue.successor) as lock:
            queue.look_ahead()
            if not still_wanted():
                return None
            # One round trip for the two requests: the journal read beside the fence.
            reading = beside(lambda: journal.read(kube, settings.lease_namespace), "booking-journal")
            version = fence(kube, settings, clock, queue.leaving())
            queue.left()
            found, journal_version = reading.result()
            unbroken = found is not None and found.unbroken(lock.found)
            if unbroken and found.covers(surveyed.position):
                ledger = surveyed.with_journal(found)
            else:
                ledger = with_bookings(kube, surveyed.ledger, version)
            booked: Plan | Short
            created: list[dict] = []
            try:
                booked = choose(ledger)
            except placement.InsufficientGPUs as shortage:
                booked = Short(shortage, ledger)
            else:
                created = create(booked)
            if journal_version is not None:  # may be read and written: an entry, possibly of no pod
                entry = [podwire.slim(pod) for pod in created]
                journal.write(kube, settings.lease_namespace, (found or BookingJournal()).appended(
                    entry, Closing.of(lock.release_spec()), unbroken), journal_version)
            return booked
    finally:
        queue.leave()
