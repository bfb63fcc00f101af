"""Free GPUs followed while a manager waits for them: one list, then watches.

A manager waiting for GPUs (``--wait-for-gpus``) used to take the placement Lease and
list every node and every pod at least every 10 s, to catch GPUs freed and nodes coming
back: with many managers waiting, the API server listed the whole cluster for each of
them over and over, and the Lease went from one to the next only for each to find
nothing. Here a waiting manager lists nodes and pods once, then follows a watch of each
(an informer of each kind), keeping every node's and every GPU pod's part of the ledger
(``inventory.node_gpus``, ``inventory.pod_claim``: the rules of a fresh inventory), so it
learns without asking when its request would fit: a pod holding GPUs ended, a node
became Ready, was uncordoned or lost a taint. An elastic job short of GPUs follows them
the same way (``elastic``).

That answer only says when to try. The plan is still made under the Lease from a fresh
inventory (``pretraining``): a watch lags the cluster, and only a list taken while
holding the Lease sees every booking made before it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from distributetrain.core import placement
from distributetrain.core.clock import REAL_CLOCK, Clock
from distributetrain.core.inventory import ACTIVE_PODS_SELECTOR, GpuLedger, NodeGpus, PodClaim, node_gpus, pod_claim
from distributetrain.core.settings import JobSettings
from distributetrain.kube.client import Kube
from distributetrain.kube.connection import make_api_client
from distributetrain.kube.informer import Change, Informer

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
    nodes: dict[str, NodeGpus] = field(default_factory=dict)
    claims: dict[str, PodClaim] = field(default_factory=dict)
    used: Counter = field(default_factory=Counter)

    @classmethod
    def for_job(cls, settings: JobSettings) -> LedgerParts:
        # What take_inventory passes to the ledger: the same candidates.
        return cls(settings.gpu_resource, settings.candidate_tolerations, settings.candidate_selector)

    def node_part(self, node: Mapping) -> NodeGpus:
        return node_gpus(node, self.resource, self.tolerations, self.node_selector)

    def holds_gpus(self, pod: dict) -> dict | None:
        """The pod if it claims GPUs (what the pods' informer keeps); most pods do not."""
        return pod if pod_claim(pod, self.resource) else None

    def apply_node(self, event_type: str, node: Mapping) -> bool:
        """One node watch event; whether it changed the ledger (a heartbeat does not)."""
        name = node["metadata"]["name"]
        old = self.nodes.pop(name, None)
        new = None if event_type == "DELETED" else self.node_part(node)
        if new:
            self.nodes[name] = new
        return new != old

    def apply_pod(self, event_type: str, pod: Mapping) -> bool:
        """One pod watch event; whether it changed what is used (most pods hold no GPU)."""
        uid = pod["metadata"].get("uid", "")
        old = self.claims.pop(uid, None)
        new = None if event_type == "DELETED" else pod_claim(pod, self.resource)
        if new:
            self.claims[uid] = new
        if old:
            self._count(old, -1)
        if new:
            self._count(new, 1)
        return new != old

    def _count(self, claim: PodClaim, sign: int) -> None:
        self.used[claim.node] += sign * claim.gpus

    def free(self) -> dict[str, int]:
        return {name: max(0, part.gpus - self.used[name]) for name, part in self.nodes.items() if not part.refusal}

    def ledger(self) -> GpuLedger:
        """The ledger a fresh inventory of the same objects would give."""
        ledger = GpuLedger(self.resource)
        for part in self.nodes.values():
            ledger.count_node(part)
        for claim in self.claims.values():
            ledger.count_claim(claim)
        return ledger


def waiting_client(kube: Kube) -> Kube:
    """A client of its own for the waiting watches: their longer requests
    (``WATCH_CHUNK_S``) and connections stay apart from the manager's."""
    timeouts = dataclasses.replace(kube.timeouts, watch_chunk_s=WATCH_CHUNK_S)
    return Kube(make_api_client(kube.api_client.configuration, timeouts), timeouts)


class FreeGpuWatch:
    """While open, follows the free GPUs of the job's candidate nodes (a context manager).

    Two informers, of the nodes and of the pods holding GPUs (every namespace), each on a
    thread of its own, list once and then watch; every change to the ledger adds one to
    ``generation``. ``fits()`` says whether the request fits now, and ``wait_until_fits``
    waits for a change that makes it fit. A permission missing for the list or the watch
    is raised by either, in the manager's thread.
    """

    def __init__(self, kube: Kube, settings: JobSettings, client: Callable[[Kube], Kube] = waiting_client,
                 clock: Clock = REAL_CLOCK):
        self.parts = LedgerParts.for_job(settings)
        self.num_gpus = settings.num_gpus
        self.generation = 0  # changes to the ledger so far
        self.clock = clock
        self._changed = threading.Condition()
        waiting = client(kube)
        follow = dict(clock=clock, relist_delay_s=RELIST_DELAY_S, thread_span_s=WATCH_SPAN_S)
        self.nodes = Informer(waiting, "nodes", **follow)
        # A watch with the lists' selector reports a pod that ends as DELETED.
        self.pods = Informer(waiting, "pods", None, selectors={"field_selector": ACTIVE_PODS_SELECTOR},
                             keep=self.parts.holds_gpus, **follow)
        self.nodes.add_handler(lambda changes: self._apply(self.parts.apply_node, changes))
        self.pods.add_handler(lambda changes: self._apply(self.parts.apply_pod, changes))
        self._informers = (self.nodes, self.pods)

    def __enter__(self) -> FreeGpuWatch:
        for informer in self._informers:
            informer.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for informer in self._informers:
            informer.__exit__(*exc_info)

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
        return None if free is None else plannable(free, self.num_gpus)

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

    def _apply(self, apply: Callable[[str, dict], bool], changes: Sequence[Change]) -> None:
        """One informer's batch (a list's differences or one event); a failure reaches the
        waiter through the informer, so one wakes it here too."""
        with self._changed:
            changed = [apply(change.type, change.new if change.new is not None else change.old)
                       for change in changes]
            if any(changed):
                self.generation += 1
            self._changed.notify_all()
