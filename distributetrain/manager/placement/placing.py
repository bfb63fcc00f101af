"""The one wait of every placement: book under the Lease, else wait for a change.

A direct attempt (``directplacement``), a queued one once Kueue admits it
(``queueing``) and an elastic job's replacements (``elastic``) all book their GPUs
through ``FreeGpuBooking``: a booking under the placement Lease (``booking.book``);
short of GPUs, the free GPUs followed (``FreeGpuWatch``, one list and watches, opened at
the first shortage) and a booking again only once a change there makes the request fit,
or at the deadline. No Lease is taken and nothing listed while nothing changes; waiting
for Kueue's admission takes neither (``queueing``).

The plan of a direct attempt and the objects it creates are pure (``plan_attempt``,
``attempt_objects``), so ``render`` shows what the manager creates by the same code.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from distributetrain.core import errors
from distributetrain.core.pods import gang
from distributetrain.core.placement import gpuclaims, inventory, topology
from distributetrain.core.clock import Clock
from distributetrain.core.pods.newnodepods import NewNodePlace
from distributetrain.core.placement.placement import Plan
from distributetrain.core.placement.scaleup import new_node_place, new_node_shares
from distributetrain.core.settings import JobSettings
from distributetrain.core.pods.sshkeys import JobKeys
from distributetrain.kube.client import Kube
from distributetrain.manager.placement import booking
from distributetrain.manager.placement.freegpus import FreeGpuWatch

log = logging.getLogger(__name__)

# Book at most this often, however often GPUs free up and are taken.
REPLAN_MIN_INTERVAL_S = 1.0


class PlanShape(Protocol):
    """A job kind's plan (``kinds``: static or elastic)."""

    def plan(self, free: Mapping[str, int], gpus: int, paths: Mapping[str, topology.Path] = {}) -> Plan: ...


@dataclass(frozen=True)
class Planned:
    """A direct attempt's plan, and where its objects go besides it."""

    plan: Plan
    domains: str = ""  # with --topology: the network domains of the plan
    dra_nodes: frozenset[str] = frozenset()  # nodes whose pods claim their GPUs (``gpuclaims``)
    new_node_place: NewNodePlace = field(default_factory=NewNodePlace)  # where shares on new nodes go


def plan_attempt(kind: PlanShape, ledger: inventory.GpuLedger, settings: JobSettings,
                 may_grow: bool) -> Planned:
    """The kind's plan on the ledger's free GPUs; where the job makes the cluster grow and
    ``may_grow``, the rest on new nodes (``booking.plan_or_grow``). Raises InsufficientGPUs."""
    plan = booking.plan_or_grow(lambda free, gpus: kind.plan(free, gpus, ledger.paths), ledger.free(), settings,
                                may_grow, ledger.volume_claims, ledger.paths)
    place = new_node_place(plan, ledger.labels, settings) if new_node_shares(plan) else NewNodePlace()
    return Planned(plan, topology.describe(plan, ledger.paths, settings.topology), frozenset(ledger.dra_nodes()),
                   place)


def attempt_objects(settings: JobSettings, planned: Planned, keys: JobKeys, attempt: int,
                    as_gang: bool = False) -> list[dict]:
    """The attempt's Secret, then its ResourceClaimTemplates and pods, as created; ``as_gang``
    (the cluster serves PodGroups), its PodGroup before its pods, unless a share is on a node
    the cluster adds (``core.pods.gang``)."""
    objects = gpuclaims.job_objects(settings, planned.plan, keys, attempt, planned.new_node_place,
                                    set(planned.dra_nodes))
    if as_gang and not new_node_shares(planned.plan):
        return gang.job_objects(settings, objects, attempt)
    return objects


class FreeGpuBooking:
    """Bookings of one request, and the free GPUs followed between them (a context manager:
    the watch closes with it). ``fits(free)``: whether the request fits followed free GPUs
    (default: ``--num-gpus`` as the planner plans it). ``on_change`` hears each change to
    the followed free GPUs, for a caller that waits on something else meanwhile."""

    def __init__(self, kube: Kube, settings: JobSettings, clock: Clock,
                 fits: Callable[[Mapping[str, int]], bool] | None = None,
                 client: Callable[[Kube], Kube] | None = None, on_change: Callable[[], None] = lambda: None):
        self.kube, self.settings, self.clock = kube, settings, clock
        self.fits, self.client, self.on_change = fits, client, on_change
        self.watch: FreeGpuWatch | None = None  # from the first shortage on
        self.seen = 0  # the watch's generation when the last booking began
        self.next_try_at = -math.inf

    def __enter__(self) -> FreeGpuBooking:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self.watch is not None:
            self.watch.__exit__(None, None, None)
            self.watch = None

    def book(self, choose: booking.Choose, create: booking.Create, until: float,
             on_short: Callable[[booking.Short], None] = lambda short: None, shared_survey: bool = False,
             surveyed_hook: Callable[[inventory.GpuLedger], None] = lambda ledger: None,
             before_each: Callable[[], None] = lambda: None) -> Plan | booking.Short:
        """Booked (the plan), or at ``until`` (monotonic) still short (the last shortage).
        ``before_each`` runs before each booking, ``on_short`` hears each shortage before the
        wait; ``shared_survey`` is the first booking's: any survey begun since this call (once 100
        managers had each written their phase, a survey one began was too early for others)."""
        asked_at = self.clock.now()
        while True:
            before_each()
            shared_since = asked_at if shared_survey and self.watch is None else None
            booked = self.try_once(choose, create, until, shared_since, surveyed_hook)
            if isinstance(booked, list):
                return booked
            if isinstance(booked, booking.Short):
                if self.clock.monotonic() >= until:
                    return booked
                on_short(booked)
                self.follow(booked.ledger)
            if self.wait_for_change(until):
                log.info("job %s: the free GPUs may hold the request now; booking again", self.settings.job_name)

    def try_once(self, choose: booking.Choose, create: booking.Create, until: float,
                 shared_since: float | None = None,
                 surveyed_hook: Callable[[inventory.GpuLedger], None] = lambda ledger: None) -> Plan | booking.Short | None:
        """One booking (``booking.book``): None when, once the Lease is held, the followed
        free GPUs do not fit the request (another manager took them) and ``until`` is not over."""
        self.clock.sleep(self.next_try_at - self.clock.monotonic())
        self.next_try_at = self.clock.monotonic() + REPLAN_MIN_INTERVAL_S
        self.seen = self.watch.generation if self.watch else 0
        return booking.book(self.kube, self.settings, choose, create, self.clock, until,
                            lambda: self.may_fit() or self.clock.monotonic() >= until, shared_since, surveyed_hook)

    def follow(self, ledger: inventory.GpuLedger) -> None:
        """Follow the free GPUs of the ledger's candidates (its claims, its DRA class), if not yet."""
        if self.watch is None:
            self.watch = FreeGpuWatch(self.kube, self.settings, self.clock, self.client, self.fits,
                                      ledger.volume_claims, ledger.device_class, self.on_change).__enter__()

    @property
    def following(self) -> bool:
        """Whether the free GPUs are followed: since a shortage, until ``close``."""
        return self.watch is not None

    def may_fit(self) -> bool:
        """Whether the followed free GPUs may hold the request: True unless they say not
        (not followed, not listed yet, or unfollowable: a fresh inventory decides)."""
        try:
            return self.watch is None or self.watch.fits() is not False
        except errors.DistributeTrainError:
            return True  # logged once, by its informer

    def changed(self) -> bool:
        """Whether a change since the last booking began makes the request fit now."""
        return self.watch is None or (self.watch.generation > self.seen and self.may_fit())

    def retry(self) -> None:
        """The next ``changed`` asks only whether the request may fit: a booking failed, try again."""
        self.seen = -1

    def wait_for_change(self, until: float) -> bool:
        """Until a change since the last booking began makes the request fit (True), or ``until`` (False)."""
        return self.watch is None or self.watch.wait_until_fits(self.seen, until)
