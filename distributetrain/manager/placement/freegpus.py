"""Free GPUs followed while a manager waits for them: one list, then watches.

A manager waiting for GPUs (``--wait-for-gpus``) must not poll: if each took the
placement Lease and listed every node and every pod every few seconds, many waiting
managers would have the API server list the whole cluster for each of them over and
over, and pass the Lease from one to the next only for each to find nothing. So a
waiting manager lists nodes and pods once, then follows a watch of each
(an informer of each kind), keeping every node's and every GPU pod's part of the ledger
(``inventory.node_gpus``, ``inventory.pod_claim``: the rules of a fresh inventory), so it
learns without asking when its request would fit: a pod holding GPUs ended, a node
became Ready, was uncordoned or lost a taint. With the job's --device-class, DRA
GPUs are followed too: the ResourceSlices (a node's devices) and the devices each
ResourceClaim holds (``dracounting``: a claim deallocated when its pod ends). An elastic
job short of GPUs follows them the same way (``elastic``).

That answer only says when to try. The plan is still made under the Lease from a fresh
inventory (``pretraining``): a watch lags the cluster, and only a list taken while
holding the Lease sees every booking made before it.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from distributetrain.core.placement import dracounting, placement
from distributetrain.core.clock import Clock
from distributetrain.core.placement.projections import GpuPodClaims, watched_node
from distributetrain.core.placement.dracounting import ClassSelector, DeviceId
from distributetrain.core.placement.inventory import (ACTIVE_PODS_SELECTOR, GpuLedger, NodeGpus, PodClaim, node_gpus,
                                                      pod_claim)
from distributetrain.core.settings import JobSettings
from distributetrain.core.placement.volumeclaims import JobClaims
from distributetrain.kube import dra
from distributetrain.kube.client import Kube
from distributetrain.kube.connection import make_api_client
from distributetrain.kube.informer import Change, keep_whole
from distributetrain.kube.sharedinformers import Subscription

# Each watch request of a waiting manager lasts this long (the manager's own watches: 4 s,
# so a stalled connection hides a worker's loss briefly). A wait lasts minutes, and a
# stalled connection delays seeing freed GPUs by this much at most (plus the read slack).
WATCH_CHUNK_S = 30.0
WATCH_SPAN_S = 60.0  # one watch call on an informer's thread: how soon it notices it was told to stop
RELIST_DELAY_S = 1.0  # after a transient failure: never a busy loop


def plannable(free: Mapping[str, int], gpus: int) -> bool:
    """Whether the planner would place ``gpus`` on these free GPUs."""
    try:
        placement.plan(free, gpus)
    except placement.InsufficientGPUs:
        return False
    return True


@dataclass
class LedgerParts:
    """Each node's and each GPU pod's part of a ``GpuLedger``, by node name and pod uid,
    so a watch event replaces or removes exactly one object's part. What pods use is
    kept summed per node, so asking whether a request fits costs one pass over the nodes."""

    resource: str
    tolerations: tuple[dict, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    volume_claims: JobClaims | None = None  # the job's PersistentVolumeClaims: where its pods can mount them
    nodes: dict[str, NodeGpus] = field(default_factory=dict)
    claims: dict[str, PodClaim] = field(default_factory=dict)
    used: Counter = field(default_factory=Counter)
    device_class: ClassSelector | None = None  # the job's: DRA GPUs are followed (``DraParts``)
    dra: DraParts | None = None

    def __post_init__(self) -> None:
        if self.device_class is not None and self.dra is None:
            self.dra = DraParts(self.device_class)

    @classmethod
    def for_job(cls, settings: JobSettings, volume_claims: JobClaims | None = None,
                device_class: ClassSelector | None = None) -> LedgerParts:
        # What take_inventory passes to the ledger: the same candidates.
        return cls(settings.gpu_resource, settings.candidate_tolerations, settings.candidate_selector, volume_claims,
                   device_class=device_class)

    def node_part(self, node: Mapping) -> NodeGpus:
        devices = len(self.dra.selected.get(node["metadata"]["name"], ())) if self.dra else 0
        return node_gpus(node, self.resource, self.tolerations, self.node_selector, self.volume_claims, devices)

    def claim(self, pod: Mapping) -> PodClaim | None:
        """What the pods' informer keeps of a pod: its claim on GPUs (most pods have none)."""
        return pod_claim(pod, self.resource)

    def apply_node(self, event_type: str, node: Mapping) -> bool:
        """One node watch event; whether it changed the ledger (a heartbeat does not)."""
        return self.apply_kept_node(node["metadata"]["name"], None if event_type == "DELETED" else node)

    def apply_kept_node(self, name: str, node: Mapping | None) -> bool:
        """A node (None: gone); where DRA GPUs are followed, kept to make its part again when
        its slices change."""
        if self.dra:
            self.dra.nodes.pop(name, None)
            if node:
                self.dra.nodes[name] = node
        return self.apply_node_part(name, self.node_part(node) if node else None)

    def apply_node_part(self, name: str, new: NodeGpus | None) -> bool:
        """A node's part (None: gone); whether it changed the ledger."""
        old = self.nodes.pop(name, None)
        if new:
            self.nodes[name] = new
        return new != old

    def apply_slice(self, key: str, resource_slice: Mapping | None) -> bool:
        """A ResourceSlice (None: gone): the parts of the nodes whose devices it changed."""
        changed = self.dra.apply_slice(key, resource_slice)
        return any([self.apply_kept_node(name, self.dra.nodes[name]) for name in changed if name in self.dra.nodes])

    def apply_device_claim(self, key: str, claim: Mapping | None) -> bool:
        """A ResourceClaim as kept (``slim_claim``; None: gone or holding none)."""
        return self.dra.apply_claim(key, claim)

    def apply_pod(self, event_type: str, pod: Mapping) -> bool:
        """One pod watch event; whether it changed what is used (most pods hold no GPU)."""
        old = self.claims.get(pod["metadata"].get("uid", ""))
        return self.apply_claim(old, None if event_type == "DELETED" else self.claim(pod), pod["metadata"].get("uid", ""))

    def apply_claim(self, old: PodClaim | None, new: PodClaim | None, uid: str = "") -> bool:
        """A pod's claim replaced (None: it holds none, or is gone); whether it changed what is used."""
        old = self.claims.pop(old.uid if old else uid, old)
        if new:
            self.claims[new.uid] = new
        if old:
            self._count(old, -1)
        if new:
            self._count(new, 1)
        return new != old

    def _count(self, claim: PodClaim, sign: int) -> None:
        self.used[claim.node] += sign * claim.gpus

    def free(self) -> dict[str, int]:
        taken = self.dra.taken if self.dra else Counter()
        return {name: max(0, part.gpus - self.used[name] - taken[name]) for name, part in self.nodes.items()
                if not part.refusal}

    def ledger(self) -> GpuLedger:
        """The ledger a fresh inventory of the same objects would give."""
        ledger = GpuLedger(self.resource)
        for part in self.nodes.values():
            ledger.count_node(part)
        for claim in self.claims.values():
            ledger.count_claim(claim)
        for node, taken in (self.dra.taken if self.dra else {}).items():
            ledger.add_usage(node, {self.resource: taken})
        return ledger


def slim_claim(claim: Mapping) -> dict | None:
    """What the claims' informer keeps of a claim: its name and the devices it takes from
    others (``dracounting.claim_devices``); None for one that takes none."""
    devices = dracounting.claim_devices(claim)
    metadata = claim.get("metadata") or {}
    return {"metadata": {key: metadata.get(key, "") for key in ("name", "namespace")},
            "devices": [list(device) for device in devices]} if devices else None


@dataclass
class DraParts:
    """DRA GPUs as followed: the slices (each node's devices of the class) and the devices
    each claim takes, kept summed per node (``taken``)."""

    device_class: ClassSelector
    slices: dict[str, Mapping] = field(default_factory=dict)
    selected: dict[str, set[DeviceId]] = field(default_factory=dict)  # by node: its devices of the class
    claims: dict[str, tuple[DeviceId, ...]] = field(default_factory=dict)  # by namespace/name
    taken: Counter = field(default_factory=Counter)  # by node: its devices of the class claims hold
    nodes: dict[str, Mapping] = field(default_factory=dict)  # as kept (``watched_node``): to make their parts again

    def apply_slice(self, name: str, resource_slice: Mapping | None) -> set[str]:
        """The nodes whose devices of the class changed."""
        self.slices.pop(name, None)
        if resource_slice is not None:
            self.slices[name] = resource_slice
        before = self.selected
        self.selected = dracounting.class_devices(dracounting.node_devices(self.slices.values()), self.device_class)
        self.taken = dracounting.taken_per_node(self.selected, {d for held in self.claims.values() for d in held})
        return {node for node in {*before, *self.selected} if before.get(node) != self.selected.get(node)}

    def apply_claim(self, key: str, claim: Mapping | None) -> bool:
        """A claim (``slim_claim``'s form; None: gone); whether a node's devices taken changed."""
        old = self.claims.pop(key, ())
        new = tuple(tuple(device) for device in (claim or {}).get("devices") or ())
        if new:
            self.claims[key] = new
        before = Counter(self.taken)
        self.taken.subtract(dracounting.taken_per_node(self.selected, old))
        self.taken.update(dracounting.taken_per_node(self.selected, new))
        self.taken = +self.taken
        return self.taken != before


def waiting_client(kube: Kube) -> Kube:
    """A client of its own for the waiting watches: their longer requests
    (``WATCH_CHUNK_S``) and connections stay apart from the manager's."""
    timeouts = dataclasses.replace(kube.timeouts, watch_chunk_s=WATCH_CHUNK_S)
    return Kube(make_api_client(kube.api_client.configuration, timeouts), kube.clock, timeouts)


class FreeGpuWatch:
    """While open, follows the free GPUs of the job's candidate nodes (a context manager).

    Two informers, of the nodes and of the pods holding GPUs (every namespace), each on a
    thread of its own and shared with the process's other users of the kind
    (``kube.sharedinformers``: the node watch), list once and then watch; every change to the ledger adds one to
    ``generation``. ``fits()`` says whether the request fits now, and ``wait_until_fits``
    waits for a change that makes it fit. A permission missing for the list or the watch
    is raised by either, in the manager's thread.

    With the job's ``volume_claims`` (as the last booking read them), nodes where they cannot be
    mounted are not followed, and with a one-node claim the request fits only on a node
    that holds it whole. Who mounts a claim now is not followed: the booking reads it.
    """

    def __init__(self, kube: Kube, settings: JobSettings, clock: Clock, client: Callable[[Kube], Kube] | None = None,
                 fits: Callable[[Mapping[str, int]], bool] | None = None,
                 volume_claims: JobClaims | None = None, device_class: ClassSelector | None = None,
                 on_change: Callable[[], None] = lambda: None):
        self.volume_claims = volume_claims.lasting() if volume_claims else None
        # Told of each change to the ledger (in the informer's thread, this watch's lock
        # not held): a waiter that waits on something else besides is woken by it.
        self.on_change = on_change
        self.parts = LedgerParts.for_job(settings, self.volume_claims, device_class)
        # Whether the request fits these free GPUs: as the planner would plan --num-gpus,
        # unless the caller's request is another (a queued attempt's fixed shares).
        self.request_fits = fits or (lambda free: plannable(free, settings.num_gpus))
        self.generation = 0  # changes to the ledger so far
        self.clock = clock
        self._changed = threading.Condition()
        # The process's informers (shared: the node watch follows the same Nodes), each on
        # a thread of its own. Each keeps what the ledger reads: a node's cut
        # (``projections.watched_node``), a pod's claim on GPUs (most pods have none, and are
        # not kept), so the memory is the ledger's, not the cluster's. A watch with the lists'
        # selector reports a pod that ends as DELETED.
        # One client of its own for the informers this watch is the first to open.
        follow = dict(clock=clock, client=functools.cache(client or waiting_client), relist_delay_s=RELIST_DELAY_S,
                      thread_span_s=WATCH_SPAN_S)
        # DRA GPUs: a node's part changes with its slices too; the slices first, so claims
        # find their nodes' devices.
        dra_kinds = () if device_class is None else ((dra.SLICES, keep_whole, self.parts.apply_slice),
                                                     (dra.CLAIMS, slim_claim, self.parts.apply_device_claim))
        self._subscriptions: list[Subscription] = []
        for kind, keep, apply in (*dra_kinds, ("Node", watched_node, self.parts.apply_kept_node)):
            self._follow(Subscription(kube, kind, keep=keep, **follow), lambda c, apply=apply: apply(c.key, c.new))
        self.nodes = self._subscriptions[-1].informer
        pods = Subscription(kube, "Pod", selectors={"field_selector": ACTIVE_PODS_SELECTOR},
                            keep=GpuPodClaims(settings.gpu_resource), **follow)
        self._follow(pods, lambda c: self.parts.apply_claim(c.old, c.new))
        self.pods = pods.informer
        self._informers = tuple(subscription.informer for subscription in self._subscriptions)

    def _follow(self, subscription: Subscription, apply: Callable[[Change], bool]) -> None:
        self._subscriptions.append(subscription)
        subscription.add_handler(lambda changes: self._apply(changes, apply))

    def __enter__(self) -> FreeGpuWatch:
        for subscription in self._subscriptions:
            subscription.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for subscription in self._subscriptions:
            subscription.close()

    def fits(self) -> bool | None:
        """Whether the request fits the followed ledger now; None until both lists are in."""
        with self._changed:
            return self._fits()

    def free(self) -> dict[str, int] | None:
        """Free GPUs per candidate node, as followed; None until both lists are in."""
        with self._changed:
            return self._free()

    def _free(self) -> dict[str, int] | None:
        for informer in self._informers:
            if informer.failure is not None:
                raise informer.failure
        if not all(informer.synced for informer in self._informers):
            return None
        return self.parts.free()

    def _fits(self) -> bool | None:
        free = self._free()
        if free is not None and self.volume_claims:
            free = self.volume_claims.candidates(free)
        return None if free is None else self.request_fits(free)

    def wait_until_fits(self, after: int, until: float) -> bool:
        """Wait until a change after generation ``after`` makes the request fit (True), or
        until ``until`` (monotonic; False). Only changes to the ledger wake it: the
        cluster's other pods coming and going do not."""
        with self._changed:
            while not (self.generation > after and self._fits()):
                remaining = until - self.clock.monotonic()
                if remaining <= 0:
                    return False
                self.clock.wait(self._changed, remaining)
            return True

    def _apply(self, changes: Sequence[Change], apply: Callable[[Change], bool]) -> None:
        """One informer's batch (a list's differences or one event), each applied to the
        ledger. A failure reaches the waiter through the informer, so one wakes it here too."""
        with self._changed:
            moved = any([apply(change) for change in changes])
            if moved:
                self.generation += 1
            self._changed.notify_all()
        if moved:
            self.on_change()
