"""Noticing a lost node while the job runs: its pods are deleted at the node controller's verdict.

A node that stops being Ready is not always lost. A kubelet or containerd restart
reports ``Ready=False`` for seconds while the pods run on; in a control-plane brownout
every node goes ``Unknown`` at once while every pod runs on. The node lifecycle
controller (``pkg/controller/nodelifecycle``) tells these apart, and the manager follows
its rules rather than act on one not-Ready report:

- **Unreachable.** A node whose kubelet has not reported for the controller's grace
  period (``--node-monitor-grace-period``, 50 s by default) becomes ``Ready=Unknown``
  and, within a monitor pass, gets the ``node.kubernetes.io/unreachable:NoExecute``
  taint: the controller's verdict. The taint evicts the job's pods when their toleration
  (``--node-lost-toleration``, 30 s by default) runs out after it is added; the manager
  acts ``EVICTION_LEAD_S`` before that, on its own clock, so their replacement starts
  sooner, but never before the taint has stood ``UNREACHABLE_STANDS_S``: long enough to
  see the controller take it back (when it finds every node down it removes the taints
  it has just added). A longer toleration is the user's word that such a spell is ridden
  out: the manager waits it out too.
- **Not Ready.** A kubelet that reports ``Ready=False`` gets the
  ``node.kubernetes.io/not-ready:NoExecute`` taint at once, and the taint evicts the
  job's pods only when their toleration runs out. So that
  taint is not a verdict: the manager acts when the node has been not Ready for the
  job's toleration window, measured from when this manager first saw it not Ready (its
  own monotonic clock: nodes' clocks never enter it; a changed ``lastTransitionTime``
  means it was Ready in between, and the window starts again). A kubelet restart is
  over long before.
- **Disruption.** The controller counts the nodes not Ready in each zone (the
  ``topology.kubernetes.io`` region and zone labels; nodes labelled
  ``node.kubernetes.io/exclude-disruption`` not counted). A zone with no Ready node, or
  with more than 2 nodes not Ready and at least 55 % of them
  (``--unhealthy-zone-threshold``), is in disruption: the controller stops or slows its
  taints there, and when every zone is down it removes them all, evicting nothing (the
  control plane, not the nodes, is the likelier fault). The manager then acts on no node
  of that zone; when the zone recovers, its nodes' windows start afresh, as the
  controller gives every node a fresh grace period on leaving disruption. Pods the
  controller's taints still evict reach the job through its pod watch.
- **Deleted.** A deleted Node is lost at once (a node missing from a relist too).

When a node is lost, the manager deletes the job's pods on it itself, with the reason on
each. The pod watch then sees them go like any lost pod: a restart, a shrink
(``--elastic``) or exit 71. The Nodes are followed by the process's one Node informer
(``kube.sharedinformers``: an elastic job short of GPUs follows them for its free GPUs
too), from the workers' creation to the chief's end, and judged on a thread beside the
pod watch; the thread also wakes when a window or a taint's wait runs out, so a verdict
due with no new node event is acted on within about a second.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from distributetrain.core import errors
from distributetrain.core.placement import podstate
from distributetrain.core.clock import Clock
from distributetrain.core.placement.inventory import node_not_ready
from distributetrain.core.placement.projections import watched_node
from distributetrain.core.settings import NODE_LOST_TOLERATION_S, JobSettings
from distributetrain.kube.api import KubeApi
from distributetrain.kube.informer import Change
from distributetrain.kube.sharedinformers import Subscription
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.reporting.reporting import Reporter
from distributetrain.manager.watching.teardown import delete_because

log = logging.getLogger(__name__)

WATCH_SPAN_S = 5.0  # one watch call: how soon the thread notices it was told to stop
RECHECK_MIN_S = 0.2  # a watch call shortened for a verdict due: never a busy loop
RELIST_DELAY_S = 1.0  # after a failed list, watch or deletion: never a busy loop

# The node lifecycle controller's vocabulary and defaults.
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NO_EXECUTE = "NoExecute"
EXCLUDE_DISRUPTION_LABEL = "node.kubernetes.io/exclude-disruption"
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")
UNHEALTHY_ZONE_THRESHOLD = 0.55  # --unhealthy-zone-threshold
UNHEALTHY_ZONE_MIN_NODES = 3  # "more than 2" nodes not Ready before a zone with Ready nodes counts as disrupted
# The controller taints the first nodes of a brownout before it sees that every node is
# down (node heartbeats are spread over their 10 s renew interval, passes run every 5 s),
# then takes the taints back. Waiting this long sees it; the taint evicts only after the
# pods' toleration, so with the default one the manager still acts first.
UNREACHABLE_STANDS_S = 10.0
# How long before an unreachable node's taint would evict the job's pods the manager
# deletes them itself: at UNREACHABLE_STANDS_S with the default toleration.
EVICTION_LEAD_S = NODE_LOST_TOLERATION_S - UNREACHABLE_STANDS_S


@dataclass(frozen=True)
class NodeHealth:
    """What the rule reads of one Node."""

    not_ready: str | None  # why it is not Ready; None if Ready
    ready_since_mark: str  # the Ready condition's lastTransitionTime: a change means a new spell
    unreachable_mark: str | None  # the unreachable:NoExecute taint's timeAdded ("" if none given); None: untainted
    zone: str
    counted: bool  # in the controller's disruption count


def _label(labels: Mapping[str, str], keys: tuple[str, ...]) -> str:
    return next((labels[key] for key in keys if key in labels), "")


def node_health(node: Mapping) -> NodeHealth:
    metadata, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    labels = metadata.get("labels") or {}
    ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
    unreachable = next((t for t in spec.get("taints") or ()
                        if t.get("key") == UNREACHABLE_TAINT and t.get("effect") == NO_EXECUTE), None)
    return NodeHealth(
        not_ready=node_not_ready(node),
        ready_since_mark=ready.get("lastTransitionTime") or "",
        unreachable_mark=None if unreachable is None else unreachable.get("timeAdded") or "",
        # The controller's zone key: region and zone together; nodes without either share one.
        zone=f"{_label(labels, REGION_LABELS)}/{_label(labels, ZONE_LABELS)}",
        counted=EXCLUDE_DISRUPTION_LABEL not in labels,
    )


def zone_disrupted(nodes: int, not_ready: int) -> bool:
    """The controller's ComputeZoneState: no Ready node, or many and most not Ready."""
    ready = nodes - not_ready
    if ready == 0:
        return not_ready > 0
    return not_ready >= UNHEALTHY_ZONE_MIN_NODES and not_ready / nodes >= UNHEALTHY_ZONE_THRESHOLD


@dataclass(frozen=True)
class Verdicts:
    lost: dict[str, str]  # node name -> why ("was deleted", "is not Ready (NodeStatusUnknown: ...)")
    recheck_at: float | None  # when a node not Ready would become lost with nothing else changing


class NodeClocks:
    """What this manager has seen of every node, and since when, on its own clock (``now``
    is always passed in: no I/O, no clock of its own). ``lost`` applies the module's rule."""

    def __init__(self, toleration_s: float):
        self.toleration_s = toleration_s
        self.unreachable_after_s = max(UNREACHABLE_STANDS_S, toleration_s - EVICTION_LEAD_S)
        self._health: dict[str, NodeHealth] = {}
        self._deleted: set[str] = set()
        self._not_ready_since: dict[str, float] = {}
        self._unreachable_since: dict[str, float] = {}
        self._zone_nodes: Counter[str] = Counter()
        self._zone_not_ready: Counter[str] = Counter()
        self._calm_since: dict[str, float] = {}  # zone -> since when it is not in disruption

    def seen(self, nodes: Mapping[str, NodeHealth | None], now: float) -> None:
        """Nodes changed, as an event or a relist shows them (``node_health``; None: deleted;
        a node missing from a relist comes as deleted, from the informer)."""
        zones = set()
        for name, node in nodes.items():  # node: its health
            before = self._health.pop(name, None)
            if before is not None:
                self._count(before, -1)
                zones.add(before.zone)
            if node is None:
                self._deleted.add(name)
                self._not_ready_since.pop(name, None)
                self._unreachable_since.pop(name, None)
                continue
            self._deleted.discard(name)
            health = self._health[name] = node
            self._count(health, +1)
            zones.add(health.zone)
            self._start_clocks(name, before, health, now)
        for zone in zones:
            if self._disrupted(zone):
                self._calm_since.pop(zone, None)
            else:
                self._calm_since.setdefault(zone, now)

    def _count(self, health: NodeHealth, sign: int) -> None:
        if health.counted:
            self._zone_nodes[health.zone] += sign
            self._zone_not_ready[health.zone] += sign * (health.not_ready is not None)

    def _disrupted(self, zone: str) -> bool:
        return zone_disrupted(self._zone_nodes[zone], self._zone_not_ready[zone])

    def _start_clocks(self, name: str, before: NodeHealth | None, health: NodeHealth, now: float) -> None:
        same_spell = before is not None and before.not_ready is not None \
            and before.ready_since_mark == health.ready_since_mark
        if health.not_ready is None:
            self._not_ready_since.pop(name, None)
        elif not same_spell or name not in self._not_ready_since:
            self._not_ready_since[name] = now
        same_taint = before is not None and before.unreachable_mark == health.unreachable_mark
        if health.unreachable_mark is None:
            self._unreachable_since.pop(name, None)
        elif not same_taint or name not in self._unreachable_since:
            self._unreachable_since[name] = now

    def forget(self, name: str) -> None:
        """A deleted node acted on."""
        self._deleted.discard(name)

    def lost(self, now: float) -> Verdicts:
        lost = {name: "was deleted" for name in self._deleted}
        recheck_at = None
        for name, not_ready_since in self._not_ready_since.items():
            health = self._health[name]
            calm_since = self._calm_since.get(health.zone)
            if calm_since is None:
                continue  # its zone is in disruption: the controller's call, not the manager's
            due_at = max(not_ready_since, calm_since) + self.toleration_s
            if name in self._unreachable_since:
                due_at = min(due_at, max(self._unreachable_since[name], calm_since) + self.unreachable_after_s)
            if now >= due_at:
                lost[name] = f"is not Ready ({health.not_ready})"
            else:
                recheck_at = due_at if recheck_at is None else min(recheck_at, due_at)
        return Verdicts(lost, recheck_at)


def pods_to_delete(pods: list[dict]) -> list[str]:
    """The job's workers and chief that still run or wait: never the manager, nor a finished pod."""
    return sorted(
        pod["metadata"]["name"] for pod in pods
        if podstate.is_training_pod(pod)
        and not podstate.is_terminating(pod) and not podstate.is_finished(pod)
    )


class NodeWatch:
    """While open, deletes the job's pods on any node that is lost (a context manager).

    The process's Node informer (shared: the free GPUs follow the same one) feeds
    ``clocks``; the watch's own thread (or ``run_until``, inline) acts after each change,
    and wakes when a verdict falls due with no node event."""

    def __init__(self, kube: KubeApi, settings: JobSettings, reporter: Reporter, clock: Clock,
                 toleration_s: float | None = None):
        self.kube = kube
        self.settings = settings
        self.reporter = reporter
        self.clock = clock
        # The job pods' own toleration (--node-lost-toleration) unless a test says otherwise.
        self.clocks = NodeClocks(settings.node_lost_toleration_s if toleration_s is None else toleration_s)
        self._subscription = Subscription(kube, "Node", keep=watched_node, clock=clock,
                                          relist_delay_s=RELIST_DELAY_S, thread_span_s=WATCH_SPAN_S)
        self.nodes = self._subscription.informer
        self._subscription.add_handler(self._seen)
        self._recheck_at: float | None = None  # when a verdict falls due with no node event
        self._changed = False  # nodes changed since the last pass acted
        self._stop = threading.Event()
        self._handled: set[str] = set()  # lost nodes already acted on; forgotten once not lost
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)

    def __enter__(self) -> NodeWatch:
        self._subscription.__enter__()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        # Not joined: it waits WATCH_SPAN_S at most, and acts on nothing once told to
        # stop (teardown owns the pods from here).
        self._stop.set()
        self._subscription.close()

    def _run(self) -> None:
        try:
            self.run_until(math.inf)
        except errors.DistributeTrainError as e:
            # Without it (RBAC from an older release: list but not watch nodes) the
            # job still runs; a lost node's pods go when the taint evicts them.
            log.error("cannot watch nodes (%s): a lost node is noticed only when its pods are evicted", e)

    def run_until(self, until: float) -> None:
        """Follow the nodes and act on their verdicts until ``until`` (of the clock) or told
        to stop; inline, this drives the informer unless it runs on its thread."""
        while not self._stop.is_set() and (now := self.clock.monotonic()) < until:
            wake_at = min(until, now + WATCH_SPAN_S)
            if self._recheck_at is not None:  # a verdict falls due with no node event: wake for it
                wake_at = min(wake_at, max(self._recheck_at, now + RECHECK_MIN_S))
            self.nodes.wait_until(lambda _: True if self._stop.is_set() or self._changed else None, wake_at)
            try:
                self._recheck_at = self._act()
            except errors.TransientApiError as e:
                log.warning("could not act on a lost node (%s); trying again", e)
                self.clock.sleep(RELIST_DELAY_S)

    def _seen(self, changes: Sequence[Change]) -> None:
        """A list's differences or one event (None: deleted), in the informer's thread."""
        now = self.clock.monotonic()
        self.clocks.seen({change.key: node_health(change.new) if change.new else None for change in changes}, now)
        self._changed = self._changed or bool(changes)

    def _act(self) -> float | None:
        """Delete the job's pods on nodes newly lost; when to look again."""
        with self.nodes.changed:  # the informer's thread updates the clocks
            self._changed = False
            verdicts = self.clocks.lost(self.clock.monotonic())
        self._handled &= set(verdicts.lost)  # not lost any more: a later loss is acted on anew
        new = {name: why for name, why in verdicts.lost.items() if name not in self._handled}
        if not new or self._stop.is_set():
            return verdicts.recheck_at
        settings = self.settings
        # One list for all the newly lost nodes (a relist may find many lost at once).
        pods, _ = self.kube.list_all("Pod", settings.namespace, label_selector=settings.selector)
        for node, why in new.items():
            doomed = pods_to_delete([pod for pod in pods if podstate.node(pod) == node])
            try:
                if doomed:
                    self._delete(node, why, doomed)
            except errors.TransientApiError:
                raise  # not marked handled: tried again at the next pass
            except errors.DistributeTrainError as e:
                log.error("job %s: could not delete the pods on lost node %s: %s", settings.job_name, node, e)
            self._handled.add(node)
            if why == "was deleted":
                with self.nodes.changed:
                    self.clocks.forget(node)
        return verdicts.recheck_at

    def _delete(self, node: str, why: str, doomed: list[str]) -> None:
        settings = self.settings
        cause = f"its node {node} {why}"
        log.warning("job %s: node %s %s: deleting its pods %s", settings.job_name, node, why, ", ".join(doomed))
        self.reporter.events.record(jobevents.NODE_LOST, f"node {node} {why}: deleted {', '.join(doomed)}")
        for name in doomed:
            delete_because(self.kube, settings.namespace, name, cause)
