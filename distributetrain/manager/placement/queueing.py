"""Jobs submitted with ``--queue``: each attempt waits in a Kueue queue as one pod group.

Kueue admits the group all or nothing against the LocalQueue's ClusterQueue quota
(``core.pods.podgroup``). So the attempt's pods are created in one burst, unpinned and gated by
the job, and the job is Queued while Kueue holds its own gates on them. Once they are
admitted, the pods are placed from the inventory at that moment (a plan made before
hours in a queue is stale), under the placement Lease like every plan (``booking``):
each pinned by its node's name, then un-gated, so the scheduler binds it.

Where Kueue puts them is Kueue's to say (``core.placement.kueuenodes``): the flavor it admits the
group into writes its node labels and tolerations into the pods, and its Topology Aware
Scheduling each pod's domain. So the pods' shares are planned on the nodes of the queue's
flavors, and each pod is pinned to a node its own selector and tolerations allow, as
read back from the pods once admitted.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from distributetrain.core import errors, exitcodes
from distributetrain.core.placement import inventory, kueuenodes, placement, topology
from distributetrain.core.pods import podgroup
from distributetrain.core.job import record
from distributetrain.core.placement.inventory import NodeGpus
from distributetrain.core.placement.kueuenodes import NodeRule
from distributetrain.core.placement.placement import Plan, format_plan
from distributetrain.core.settings import JobSettings
from distributetrain.core.pods.sshkeys import JobKeys
from distributetrain.kube import waits
from distributetrain.kube.client import Kube
from distributetrain.manager.placement import booking, placing
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.pods import networkpolicy
from distributetrain.manager.watching import podwaits
from distributetrain.manager.placement.kinds import JobKind
from distributetrain.manager.reporting.queuepositions import QueuePositions
from distributetrain.manager.processstate import ProcessState

log = logging.getLogger(__name__)

GROUP_TOKEN_BYTES = 2  # podgroup.group_name's token: 4 hex characters


@dataclass(frozen=True)
class Admitted:
    pass


def shares(ledger: inventory.GpuLedger, num_gpus: int, kind: JobKind,
           flavors: Sequence[NodeRule] = ()) -> list[int]:
    """The pods' GPU counts, fixed at creation (a pod's requests never change): planned on
    the GPUs free now for the job's pods if they fit, else on what each candidate node
    could give them with nothing else on it (what the cluster gives the job once the
    queue ahead of it has drained): its GPUs, as far as its CPU, memory and GPU sharing
    allow. With the queue's ``flavors`` (in the ClusterQueue's order, as Kueue tries
    them), on the nodes of one flavor: the group is admitted into one, and runs there."""
    shortage = None
    for gpus in (ledger.free(), ledger.idle()):
        for rule in flavors or (None,):
            candidates = gpus if rule is None else kueuenodes.allowed(gpus, ledger.selected, rule)
            try:
                return [share for _, share in kind.plan(candidates, num_gpus, ledger.paths)]
            except placement.InsufficientGPUs as e:
                shortage = e
    raise shortage


def admission(pods_of_group: list[str]) -> podwaits.Judge:
    """Admitted once Kueue's gates are gone from every pod; lost when one ends or vanishes
    first (Kueue deletes a preempted group's pods)."""

    def judge(pods: Mapping[str, dict]) -> podwaits.Outcome | Admitted | None:
        for name in pods_of_group:
            if lost := podwaits.lost(name, pods.get(name)):
                return lost
        return Admitted() if all(podgroup.is_admitted(pods[name]) for name in pods_of_group) else None

    return judge


def check_queue(kube: Kube, settings: JobSettings) -> list[NodeRule]:
    """Bad input, before anything is created: a queue that does not exist, or a request
    its ClusterQueue could never admit (under StrictFIFO it would block every job behind
    it for ever). Returns where the queue's flavors put the job's pods, in the
    ClusterQueue's order (none known where the manager may not read them)."""
    if kube.kueue_version() is None:
        raise errors.UsageError("--queue", "the cluster serves no Kueue LocalQueues (kueue.x-k8s.io): "
                                           "install Kueue, or submit without --queue")
    local = kube.read("LocalQueue", settings.namespace, settings.queue)
    if local is None:
        raise errors.UsageError("--queue", f"no LocalQueue {settings.queue!r} in namespace {settings.namespace!r}")
    cluster_queue_name = (local.get("spec") or {}).get("clusterQueue", "")
    try:
        cluster_queue = kube.read("ClusterQueue", None, cluster_queue_name) or {}
    except errors.Forbidden as e:  # rbac/kueue/clusterrole.yaml not applied: queue it unchecked
        log.warning("job %s: cannot read ClusterQueue %s (%s); its quota is not checked, nor its flavors read",
                    settings.job_name, cluster_queue_name, e)
        cluster_queue = {}
    quota = podgroup.gpu_quota(cluster_queue, settings.gpu_resource)
    if quota is not None and settings.num_gpus > quota:
        raise errors.UsageError("--num-gpus", f"requested {settings.num_gpus} GPUs but queue {settings.queue}'s "
                                              f"ClusterQueue {cluster_queue_name} admits {quota} at most")
    return _flavor_rules(kube, settings, cluster_queue)


def _flavor_rules(kube: Kube, settings: JobSettings, cluster_queue: Mapping) -> list[NodeRule]:
    """Where each of the ClusterQueue's flavors of the job's GPUs puts its pods, in order."""
    rules = []
    for name in kueuenodes.gpu_flavors(cluster_queue, settings.gpu_resource):
        try:
            flavor = kube.read("ResourceFlavor", None, name)
        except errors.Forbidden as e:
            log.warning("job %s: cannot read ResourceFlavor %s (%s); the pods' shares are planned on every node "
                        "the job may use", settings.job_name, name, e)
            return []
        if flavor is not None:  # a flavor gone: Kueue admits nothing into it
            rules.append(kueuenodes.flavor_rule(flavor, settings.pod_tolerations))
    return rules


class QueuedPlacement:
    """The attempt's GPUs through a Kueue queue: create the group, wait, then place it."""

    def __init__(self, kube: Kube, state: ProcessState, kind: JobKind):
        self.kube = kube
        self.state = state
        self.kind = kind

    def place(self) -> Plan:
        settings = self.state.settings
        flavors = check_queue(self.kube, settings)
        ledger = booking.take_inventory(self.kube, _tolerating(settings, flavors), shared=True, clock=self.state.clock)
        booking.check_request(ledger, settings)
        wanted = shares(ledger, settings.num_gpus, self.kind, flavors)
        return self.resume(wanted, self._create(wanted))

    def adopt(self, plan: Plan, chief: dict) -> Plan:
        """An attempt's pods found whole (a restarted manager, or post-training): still
        queued (none placed: waited for again), or placed."""
        attempt = self.state.attempt
        if not podgroup.is_placed(chief):
            log.info("job %s: adopting attempt %d, queued", self.state.settings.job_name, attempt.number)
            return self.resume([share for _, share in plan], podgroup.group_of(chief))
        log.info("job %s: adopting attempt %d, plan %s", self.state.settings.job_name, attempt.number,
                 format_plan(plan))
        return plan

    def resume(self, wanted: list[int], group: str) -> Plan:
        """Wait for the attempt's group `group` (pods of `wanted` GPUs, workers first, the
        chief last) to be admitted, then place it: after `place` created it, or for a
        manager restarted while it was queued."""
        attempt = self.state.attempt
        pods = [*attempt.workers(len(wanted) - 1), attempt.chief]
        with QueuePositions(self.kube, self.state.reporter, group, self.state.clock):  # a group's Workload is named so
            admitted = self._wait_for_admission(pods)
        # As Kueue left them: its flavor's node labels and tolerations, its topology's domain.
        return self._pin(pods, wanted, [kueuenodes.pod_rule(admitted[name]) for name in pods])

    def _create(self, wanted: list[int]) -> str:
        settings, attempt = self.state.settings, self.state.attempt
        group = podgroup.group_name(settings.job_name, attempt.number, secrets.token_hex(GROUP_TOKEN_BYTES))
        secret, *pods = podgroup.queued_attempt(settings, wanted, JobKeys.generate(settings.job_name), attempt.number,
                                                group)
        self.kube.create_owned(secret)
        networkpolicy.isolate(self.kube, settings)
        self.kube.create_all_owned(pods)
        self.state.pods.relist()  # the admission judged on a store that holds them
        self.state.reporter.events.record(
            jobevents.QUEUED, f"{settings.num_gpus} GPUs as one workload of {len(pods)} pods "
                           f"({', '.join(map(str, wanted))} GPUs) in queue {settings.queue}")
        self.state.reporter.phase(record.QUEUED)
        return group

    def _wait_for_admission(self, pods: list[str]) -> Mapping[str, dict]:
        """The pods once admitted (Kueue's gates gone)."""
        settings = self.state.settings
        result = waits.judged(self.state.pods, admission(pods), self.state.deadline)
        if isinstance(result, waits.Judged) and isinstance(result.outcome, podwaits.PodLost):
            raise result.outcome.error(" while queued")
        if isinstance(result, waits.DeadlinePassed):
            raise errors.JobFailed(f"not admitted by queue {settings.queue} within --active-deadline "
                                   f"{settings.active_deadline_s:.0f}s", exitcodes.TIMED_OUT)
        log.info("job %s: admitted by queue %s", settings.job_name, settings.queue)
        return result.pods

    def _pin(self, pods: list[str], wanted: list[int], rules: list[NodeRule]) -> Plan:
        """Nodes for the admitted pods, each among those its ``rules`` allow, booked as
        every plan is (``placing``): short of GPUs, booked again only once the free GPUs
        followed could hold the shares, within --worker-ready-timeout."""
        settings, clock = self.state.settings, self.state.clock
        give_up_at = min(clock.monotonic() + settings.worker_ready_timeout_s, self.state.deadline)
        choice = _Choice(settings, wanted, rules)

        def fits(free: Mapping[str, int]) -> bool:
            return free_gpus.watch is not None and choice.nodes(free, free_gpus.watch.parts.nodes) is not None

        with placing.FreeGpuBooking(self.kube, _tolerating(settings, rules), clock, fits) as free_gpus:
            booked = free_gpus.book(choice, lambda plan: self._place_pods(pods, plan), give_up_at)
        if isinstance(booked, booking.Short):
            raise errors.JobFailed(f"admitted by queue {settings.queue}, but no nodes hold its pods now"
                                   f"{choice.where}: {booked}", exitcodes.INSUFFICIENT_GPUS)
        self._planned(booked, choice.domains)
        return booked

    def _planned(self, plan: Plan, domains: str) -> None:
        settings = self.state.settings
        self.state.reporter.planned(plan, domains)
        in_domains = f" in {domains}" if domains else ""
        self.state.reporter.events.record(jobevents.PLANNED, f"admitted by queue {settings.queue}; "
                                                        f"{format_plan(plan)}{in_domains} (the chief's share last)")

    def _place_pods(self, pods: list[str], plan: Plan) -> list[dict]:
        namespace, placed = self.state.settings.namespace, []
        for name, (node, _) in zip(pods, plan):
            pinned = self.kube.patch("Pod", namespace, name, podgroup.pin_patch(node))
            placed.append(self.kube.patch("Pod", namespace, name, podgroup.ungate_patch(pinned)))
        return placed


def _tolerating(settings: JobSettings, rules: Sequence[NodeRule]) -> JobSettings:
    """The job's settings for an inventory of every node ``rules`` may allow: tolerating
    the taints they tolerate too (a flavor's), whatever the job's own tolerations."""
    extra = kueuenodes.tolerations_beyond(rules, settings.pod_tolerations)
    return settings.replace(tolerations=(*settings.tolerations, *extra)) if extra else settings


class _Choice:
    """A node for each admitted pod's share, among the nodes its rule allows: with one rule
    for all (a flavor), in the tightest network domain that holds them, as the planner
    would choose it; with a rule of each pod's own (Kueue's topology assignment, which
    chose their domains), on nodes of the domain each was given, a node of its own if
    they can, else as Kueue packed them."""

    def __init__(self, settings: JobSettings, wanted: list[int], rules: list[NodeRule]):
        self.settings, self.wanted, self.rules = settings, wanted, rules
        self.domains = ""  # with --topology: the network domains of the nodes chosen
        distinct = sorted({str(rule) for rule in rules} - {str(NodeRule())})
        self.where = f" on the nodes Kueue allows them ({'; '.join(distinct)})" if distinct else ""

    def __call__(self, ledger: inventory.GpuLedger) -> Plan:
        free = ledger.free()
        nodes = self.nodes(free, ledger.selected, ledger.paths)
        if nodes is None:
            raise placement.InsufficientGPUs(sum(self.wanted), sum(free.values()))
        plan = list(zip(nodes, self.wanted))
        self.domains = topology.describe(plan, ledger.paths, self.settings.topology)
        return plan

    def nodes(self, free: Mapping[str, int], parts: Mapping[str, NodeGpus],
              paths: Mapping[str, topology.Path] | None = None) -> list[str] | None:
        """A node for each share on these free GPUs (``parts``: each node's labels and
        taints), or None; without ``paths``, the network domains are not chosen."""
        allowed = [kueuenodes.allowed(free, parts, rule) for rule in self.rules]
        if all(rule == self.rules[0] for rule in self.rules):
            nodes = (topology.assign(self.wanted, allowed[0], paths, self.settings.topology) if paths is not None
                     else podgroup.assign(self.wanted, allowed[0]))
        else:
            nodes = podgroup.assign(self.wanted, free, [set(nodes) for nodes in allowed])
        if nodes is None and any(rule.topology for rule in self.rules) and not self.settings.host_network:
            # Pods Kueue's topology assignment packed on one node go there (but hostPorts would collide).
            nodes = podgroup.assign(self.wanted, free, [set(nodes) for nodes in allowed], stack=True)
        return nodes
