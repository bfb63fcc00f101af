"""Free GPUs followed while a manager waits for them: one list, then watches.

A manager waiting for GPUs (``--wait-for-gpus``) used to take the placement Lease and
list every node and every pod at least every 10 s, to catch GPUs freed and nodes coming
back: with many managers waiting, the API server listed the whole cluster for each of
them over and over, and the Lease went from one to the next only for each to find
nothing. Here a waiting manager lists nodes and pods once, then follows a watch of each,
keeping every node's and every GPU pod's part of the ledger (``inventory.node_gpus``,
``inventory.pod_claim``: the rules of a fresh inventory), so it learns without asking
when its request would fit: a pod holding GPUs ended, a node became Ready, was
uncordoned or lost a taint.

That answer only says when to try. The plan is still made under the Lease from a fresh
inventory (``pretraining``): a watch lags the cluster, and only a list taken while
holding the Lease sees every booking made before it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from distributetrain.core import errors, placement
from distributetrain.core.inventory import ACTIVE_PODS_SELECTOR, GpuLedger, NodeGpus, PodClaim, node_gpus, pod_claim
from distributetrain.core.settings import JobSettings
from distributetrain.kube.client import Kube, make_api_client

log = logging.getLogger(__name__)

# Each watch request of a waiting manager lasts this long (the manager's own watches: 4 s,
# so a stalled connection hides a worker's loss briefly). A wait lasts minutes, and a
# stalled connection delays seeing freed GPUs by this much at most (plus the read slack).
WATCH_CHUNK_S = 30.0
WATCH_SPAN_S = 60.0  # one watch call on a follower thread: how soon it notices it was told to stop
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
        return cls(settings.gpu_resource, tuple(settings.tolerations), dict(settings.node_selector))

    def node_part(self, node: Mapping) -> NodeGpus:
        return node_gpus(node, self.resource, self.tolerations, self.node_selector)

    def nodes_of(self, nodes: Iterable[Mapping]) -> dict[str, NodeGpus]:
        """Every node's part, from a fresh list (built outside any lock: it reads no state)."""
        return {part.name: part for part in map(self.node_part, nodes)}

    def claims_of(self, pods: Iterable[Mapping]) -> dict[str, PodClaim]:
        """The claims of a fresh list of pods; pods that claim nothing are not kept."""
        return {claim.uid: claim for claim in (pod_claim(pod, self.resource) for pod in pods) if claim}

    def set_nodes(self, nodes: dict[str, NodeGpus]) -> None:
        self.nodes = nodes

    def set_claims(self, claims: dict[str, PodClaim]) -> None:
        self.claims = claims
        self.used = Counter()
        for claim in claims.values():
            self._count(claim, 1)

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


def _listed(kube: Kube, kind: str, selectors: Mapping[str, str], versions: list[str]) -> Iterator[dict]:
    """Every object of one list, page by page (a large cluster's pods never sit in
    memory at once); each page's resourceVersion is appended to ``versions``."""
    for page, version in kube.list_pages(kind, **selectors):
        versions.append(version)
        yield from page


def follow(
    kube: Kube,
    kind: str,
    replace: Callable[[Iterator[dict]], None],
    apply: Callable[[str, dict], None],
    stop: threading.Event,
    span_s: float = WATCH_SPAN_S,
) -> None:
    """List ``kind`` ("nodes" or "pods", every namespace) once, then follow its watch
    until ``stop`` is set: ``replace`` gets every object of a list, ``apply`` each event
    after it (bookmarks only move the version on).

    Each watch resumes from the last version seen. It lists again only when it must: at
    once when that version is too old (410 Gone), ``RELIST_DELAY_S`` after a transient
    failure (the watch ended with an error, the API unreachable past its retry deadline).
    Any other API error is raised: nothing can be followed without that permission.
    """
    # A watch with the lists' selector reports a pod that ends as DELETED.
    selectors = {"field_selector": ACTIVE_PODS_SELECTOR} if kind == "pods" else {}
    version = ""
    while not stop.is_set():
        try:
            if not version:
                versions: list[str] = []
                replace(_listed(kube, kind, selectors, versions))
                version = versions[-1]
            events = (kube.watch_nodes(version, span_s) if kind == "nodes"
                      else kube.watch_pods(None, version, span_s, **selectors))
            for event_type, obj in events:
                version = obj["metadata"].get("resourceVersion") or version
                if event_type != "BOOKMARK":
                    apply(event_type, obj)
                if stop.is_set():
                    return
        except errors.Gone:
            log.info("watch of %s: resourceVersion %s is too old; listing again", kind, version)
            version = ""
        except errors.TransientApiError as e:
            log.warning("watch of %s failed (%s); listing again in %.0fs", kind, e, RELIST_DELAY_S)
            version = ""
            stop.wait(RELIST_DELAY_S)


def waiting_client(kube: Kube) -> Kube:
    """A client of its own for the waiting watches: their longer requests
    (``WATCH_CHUNK_S``) and connections stay apart from the manager's."""
    timeouts = dataclasses.replace(kube.timeouts, watch_chunk_s=WATCH_CHUNK_S)
    return Kube(make_api_client(kube.api_client.configuration, timeouts), timeouts)


class FreeGpuWatch:
    """While open, follows the free GPUs of the job's candidate nodes (a context manager).

    Two threads, one per kind, list and then watch (``follow``); every change to the
    ledger adds one to ``generation``. ``fits()`` says whether the request fits now, and
    ``wait_until_fits`` waits for a change that makes it fit. A permission missing for
    the list or the watch is raised by either, in the manager's thread.
    """

    KINDS = ("nodes", "pods")

    def __init__(self, kube: Kube, settings: JobSettings, client: Callable[[Kube], Kube] = waiting_client):
        self.parts = LedgerParts.for_job(settings)
        self.num_gpus = settings.num_gpus
        self.generation = 0  # changes to the ledger so far; each list counts as one
        self._kube = client(kube)
        self._changed = threading.Condition()
        self._listed: set[str] = set()
        self._failure: errors.DistributeTrainError | None = None
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._follow, args=(kind,), name=f"free-gpus-{kind}", daemon=True)
                         for kind in self.KINDS]

    def __enter__(self) -> FreeGpuWatch:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        # Not joined: each thread's watch call ends within WATCH_SPAN_S (at its next
        # event if sooner), and what it applies meanwhile is read by no one.
        self._stop.set()

    def fits(self) -> bool | None:
        """Whether the request fits the followed ledger now; None until both lists are in."""
        with self._changed:
            return self._fits()

    def _fits(self) -> bool | None:
        if self._failure:
            raise self._failure
        if self._listed != set(self.KINDS):
            return None
        return plannable(self.parts.free(), self.num_gpus)

    def wait_until_fits(self, after: int, until: float) -> bool:
        """Wait until a change after generation ``after`` makes the request fit (True), or
        until ``until`` (monotonic; False). Only changes to the ledger wake it: the
        cluster's other pods coming and going do not."""
        with self._changed:
            while not (self.generation > after and self._fits()):
                remaining = until - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def _follow(self, kind: str) -> None:
        try:
            follow(self._kube, kind, lambda objects: self._replace(kind, objects),
                   lambda event_type, obj: self._apply(kind, event_type, obj), self._stop)
        except errors.DistributeTrainError as e:
            log.error("cannot follow %s while waiting for GPUs: %s", kind, e)
            with self._changed:
                self._failure = e
                self._changed.notify_all()

    def _replace(self, kind: str, objects: Iterator[dict]) -> None:
        parts = self.parts.nodes_of(objects) if kind == "nodes" else self.parts.claims_of(objects)
        with self._changed:
            if kind == "nodes":
                self.parts.set_nodes(parts)
            else:
                self.parts.set_claims(parts)
            self._listed.add(kind)
            self._bump()

    def _apply(self, kind: str, event_type: str, obj: dict) -> None:
        with self._changed:
            apply = self.parts.apply_node if kind == "nodes" else self.parts.apply_pod
            if apply(event_type, obj):
                self._bump()

    def _bump(self) -> None:
        self.generation += 1
        self._changed.notify_all()
