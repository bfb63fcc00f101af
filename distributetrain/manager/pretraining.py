"""Pre-training: start one attempt of the job, or adopt the one that exists.

The port of the seeds' DistributeTrain_PreTraining.py, in order:
1. pre-flight: every object is validated by a server-side dry run, so bad input
   (missing namespace, invalid image, no permission) fails before anything exists; so
   does a ``--pvc`` claim that does not exist or no pod can mount, and one not bound yet
   is waited for (``volumeclaims``);
2. under the placement Lease (``booking``): inventory, plan, then the SSH Secret, the
   pinned workers and the chief in one burst, so every GPU of the plan is held from the
   start (the chief's too, through a multi-GB image pull: no other pod can take it
   meanwhile);
3. wait (watch) until every worker is Ready and the chief is bound to its node, then
   publish the workers' addresses, which the chief asks the manager for (``discovery``).

What happens when the attempt does not start (a pod lost, not Ready in time) is the
job loop's decision (``job``), not this module's: it raises, typed.
"""

from __future__ import annotations

import contextlib
import logging

from distributetrain.core import (errors, exitcodes, gpuclaims, inventory, manifests, podgroup,
                                  podknobs, podsecurity, podstate, topology, validation)
from distributetrain.core.networkpolicy import job_policies
from distributetrain.core.newnodepods import NewNodePlace
from distributetrain.core.placement import Plan, format_plan
from distributetrain.core.scaleup import new_node_place, new_node_shares, planned_node
from distributetrain.core.settings import JobSettings
from distributetrain.core.sshkeys import JobKeys
from distributetrain.kube import dra, waits
from distributetrain.kube.client import Kube
from distributetrain.manager import (booking, earlierruns, jobevents, networkpolicy, podchecks, podwaits, quotacheck,
                                     scaleup, volumeclaims)
from distributetrain.manager.freegpus import FreeGpuWatch
from distributetrain.manager.kinds import ElasticJob, StaticJob
from distributetrain.manager.nodewatch import NodeWatch
from distributetrain.manager.queueing import QueuedPlacement
from distributetrain.manager.reporting import PodWaits
from distributetrain.manager.processstate import ProcessState
from distributetrain.manager.startwatch import StartWatch
from distributetrain.manager.teardown import tear_down

log = logging.getLogger(__name__)

# While waiting for GPUs, plan at most this often, however often GPUs free up and are taken.
REPLAN_MIN_INTERVAL_S = 1.0
PREFLIGHT_DRA_NODE = "preflight-dra-node"


def job_pods(kube: Kube, settings: JobSettings) -> dict[str, dict]:
    """This manager's pods of the job (never those of an earlier run of the same name)."""
    items, _ = kube.list_all("pods", settings.namespace, label_selector=settings.selector)
    return {p["metadata"]["name"]: p for p in items}


def preflight(kube: Kube, settings: JobSettings) -> None:
    """Server-side dry run of every kind of object the job creates; nothing is persisted."""
    if not settings.discovery_url:
        raise errors.UsageError("MANAGER_POD_IP", "the chief asks the manager for its hosts: set it to the manager "
                                                  "pod's address (downward API status.podIP, as manager.yaml does)")
    namespace = kube.namespace_metadata(settings.namespace)
    if namespace is None:
        raise errors.UsageError("--namespace", f"namespace {settings.namespace!r} does not exist")
    level = validation.host_network_refused_by(namespace.get("labels") or {})
    if settings.host_network and level:
        raise errors.UsageError("--host-network", f"namespace {settings.namespace!r} enforces PodSecurity {level!r}, "
                                                  "which forbids host networking: use --host-network false")
    podchecks.require_env_secrets(kube, settings)
    podchecks.require_pull_secrets(kube, settings)
    podchecks.require_ipv4_between_pods(kube, settings)
    volumeclaims.read_claims(kube, settings, uses=False)  # each exists, and some pod could mount it
    quotacheck.check_quotas(kube, settings)
    keys = JobKeys.generate(settings.job_name)
    # With --device-class, the chief as on a DRA node, after its ResourceClaimTemplate.
    dra_probe = {PREFLIGHT_DRA_NODE} if settings.device_class and not settings.queue else set()
    probe_plan = [("preflight-node", 1), (PREFLIGHT_DRA_NODE if dra_probe else "preflight-node", 1)]
    objects = [*job_policies(settings), *gpuclaims.job_objects(settings, probe_plan, keys,
                                                                            dra_nodes=dra_probe)]
    for obj in objects:
        try:
            admitted_as = kube.create_owned(obj, dry_run=True)
        except errors.NotFound as e:
            if obj["kind"] == gpuclaims.TEMPLATE_KIND:
                raise errors.UsageError("--device-class", f"the cluster serves no resource.k8s.io/v1 ({e})") from e
            raise errors.UsageError("--namespace", f"namespace {settings.namespace!r} does not exist ({e})") from e
        except (errors.Invalid, errors.AdmissionRefused) as e:
            # A knob naming what is not there (a RuntimeClass, a PriorityClass), or limits a LimitRange breaks.
            if knob := podknobs.refused_knob(str(e), settings):
                raise errors.UsageError(*knob) from e
            if isinstance(e, errors.AdmissionRefused):
                # The platform's UIDs (OpenShift's SCCs) refuse what a flag asked; else the cluster's own.
                raise podsecurity.platform_refusal(settings, obj["kind"], str(e)) or e
            raise errors.UsageError("job settings", f"the API server rejects the job's {obj['kind']}: {e}") from e
        if obj["kind"] == "Pod":
            podgroup.refuse_unqueued(settings, admitted_as)


class AttemptNotStarted(errors.DistributeTrainError):
    """The attempt's pods did not all start within --worker-ready-timeout."""

    def __init__(self, waiting_for: dict[str, str]):
        self.waiting_for = waiting_for  # pod name -> why it is not there yet
        super().__init__("; ".join(f"{pod}: {why}" for pod, why in waiting_for.items()))


class PreTraining:
    """Start the current attempt: adopt its pods, or plan and create them."""

    def __init__(self, kube: Kube, state: ProcessState, kind: StaticJob | ElasticJob):
        self.kube = kube
        self.state = state
        self.kind = kind  # the plan's shape
        self.settings = state.settings
        self.reporter = state.reporter
        self.attempt = state.attempt
        self.last_shortage = ""  # logged once per change
        self.domains = ""  # with --topology: the network domains of the plan being booked
        self.dra_nodes: set[str] = set()  # of the plan being booked: nodes whose pods claim their GPUs
        self.new_node_place = NewNodePlace()  # where the plan's shares on new nodes go (``scaleup``)
        self.keys_created = False  # the attempt's Secret and the job's NetworkPolicies, made before its first Lease

    def start(self) -> Plan:
        """The attempt's plan, once it holds all its GPUs and the chief has its hosts;
        raise ``AttemptLost`` when one of its pods is lost, ``AttemptNotStarted`` when late."""
        settings = self.settings
        pods = job_pods(self.kube, settings)
        plan = self._adopt(pods)
        if plan is None:
            self.state.hosts.publish(None)  # a chief of this attempt must never read an earlier one's hosts
            preflight(self.kube, settings)
            volumeclaims.wait_until_bound(self.kube, self.state)
            earlierruns.clear(self.kube, settings, self.state.clock)
            plan = (QueuedPlacement(self.kube, self.state, self.kind).place() if settings.queue
                    else self._place(self.state.gpus_until))
            pods = {}
        chief, workers = self.attempt.chief, self.attempt.workers(len(plan) - 1)
        outcome = podwaits.attempt_started(chief, workers)(pods) if pods else None
        if not isinstance(outcome, (podwaits.AttemptStarted, podwaits.ChiefFinished)):  # else adopted: no news
            if new_node_shares(plan):
                plan = scaleup.wait_for_new_nodes(self.kube, self.state, plan, chief, workers)
            outcome = self._wait_until_started(chief, workers)
            if isinstance(outcome, podwaits.AttemptStarted):
                if workers:
                    self.reporter.events.record(jobevents.WORKERS_READY, f"{len(workers)} of {len(workers)} Ready: " +
                                                ", ".join(f"{name} ({address})"
                                                          for name, (address, _) in zip(workers, outcome.hosts)))
                self.reporter.phase("Running")
        if isinstance(outcome, podwaits.ChiefFinished):
            log.info("job %s: the chief ended before training started (exit code %d)", settings.job_name,
                     outcome.exit_code)
            return plan  # post-training reads its end: its exit code is the job's
        self.state.hosts.publish(outcome.hosts)
        log.info("job %s: the chief has its %d hosts", settings.job_name, len(outcome.hosts))
        return plan

    def _wait_until_started(self, chief: str, workers: list[str]) -> podwaits.AttemptStarted | podwaits.ChiefFinished:
        settings = self.settings
        self.reporter.phase("StartingWorkers")
        clock = self.state.clock
        pod_waits = PodWaits(self.reporter, [*workers, chief], clock)
        try:
            # A worker's node lost while it starts: deleted at once, a loss like any other.
            # Image pulls and new nodes do not count against --worker-ready-timeout (``startwatch``).
            with NodeWatch(self.kube, settings, self.reporter, clock=clock), \
                    StartWatch(self.kube, settings, clock) as starting:
                outcome = starting.wait(waits.selected_pods(self.kube, settings.namespace, settings.selector, clock),
                                        podwaits.attempt_started(chief, workers), [*workers, chief],
                                        self.state.deadline, pod_waits)
        finally:
            pod_waits.done()
        if isinstance(outcome, podwaits.PodLost):
            raise outcome.error(" before training started")
        if isinstance(outcome, podwaits.TimedOut):
            raise AttemptNotStarted(outcome.waiting_for)
        return outcome

    def _adopt(self, pods: dict[str, dict]) -> Plan | None:
        """The plan of this attempt's pods if they all exist (a restarted manager, or
        post-training after pre-training); None if there are none. Partial leftovers (a
        manager killed while creating them) are deleted: the attempt starts over."""
        settings = self.settings
        chief = pods.get(self.attempt.chief)
        workers = sorted((p for p in pods.values() if podstate.is_worker_of(p, self.attempt)), key=podstate.worker_index)
        if chief is None and not workers:
            return None
        plan = [(planned_node(pod), podstate.gpus_of(pod)) for pod in workers]
        if chief is not None:
            plan.append((planned_node(chief), podstate.gpus_of(chief)))
        complete = chief is not None and sum(share for _, share in plan) == settings.num_gpus \
            and [podstate.worker_index(w) for w in workers] == list(range(len(workers)))
        placed = [podgroup.is_placed(pod) for pod in [*workers, *([chief] if chief else [])]]
        if complete and not all(placed) and any(placed):
            complete = False  # a queued group the manager was killed while placing
        if not complete:
            log.warning("job %s: the pods of attempt %d are incomplete; deleting them and starting over",
                        settings.job_name, self.attempt.number)
            tear_down(self.kube, settings, keep_chief=False)
            return None
        if not any(placed):
            log.info("job %s: adopting attempt %d, queued", settings.job_name, self.attempt.number)
            return QueuedPlacement(self.kube, self.state, self.kind).resume([share for _, share in plan],
                                                                              podgroup.group_of(chief))
        log.info("job %s: adopting attempt %d, plan %s", settings.job_name, self.attempt.number, format_plan(plan))
        return plan

    def _place(self, give_up_at: float) -> Plan:
        """Book the attempt's GPUs (``booking``); wait for GPUs while allowed.

        While it waits, the free GPUs are followed from one list and watches
        (``FreeGpuWatch``): the Lease and a fresh inventory, which alone decide the plan,
        are taken again only when those say the request fits, and once more when the
        wait is over (for the reasons the job fails with).
        """
        wait_until = min(give_up_at, self.state.deadline)
        clock = self.state.clock
        next_plan_at = 0.0
        with contextlib.ExitStack() as waiting:
            watch: FreeGpuWatch | None = None  # from the first shortage on

            def still_wanted() -> bool:
                # The manager that held the Lease before may have taken the GPUs seen free:
                # its pods are on the watch by then, so no list is needed to know.
                return watch is None or watch.fits() is not False or clock.monotonic() >= wait_until

            while True:
                clock.sleep(next_plan_at - clock.monotonic())
                next_plan_at = clock.monotonic() + REPLAN_MIN_INTERVAL_S
                seen = watch.generation if watch else 0
                self.reporter.phase("Planning")
                # A busy Lease is tried for as long as the job may wait for GPUs (LOCK_TIMEOUT_S at least).
                # The first plan shares a survey of the cluster with the managers starting
                # with it; one woken by GPUs freed surveys again (``booking.survey``).
                booked = booking.book(self.kube, self.settings, self._choose, self._create_pods, clock,
                                      wait_until, still_wanted, shared_survey=watch is None,
                                      surveyed_hook=self._before_the_lease)
                if isinstance(booked, list):
                    return booked
                if isinstance(booked, booking.Short):
                    self._short(booked, wait_until)
                self.reporter.phase("WaitingForGPUs")
                if watch is None:
                    watch = waiting.enter_context(FreeGpuWatch(self.kube, self.settings, clock=clock,
                                                               volume_claims=booked.ledger.volume_claims,
                                                               device_class=booked.ledger.device_class))
                self._wait_for_freed_gpus(watch, seen, wait_until)

    def _before_the_lease(self, surveyed: inventory.GpuLedger) -> None:
        """What no other manager waits on: the request checked against the survey (bad
        input creates nothing), then the attempt's SSH keys and the job's NetworkPolicies."""
        booking.check_request(surveyed, self.settings)
        if not self.keys_created:
            self.kube.create_owned(manifests.ssh_secret(self.settings, JobKeys.generate(self.settings.job_name)))
            networkpolicy.isolate(self.kube, self.settings)
            self.keys_created = True

    def _choose(self, ledger: inventory.GpuLedger) -> Plan:
        booking.check_request(ledger, self.settings)
        free = ledger.free()
        # No node is added for an attempt that could not wait for it (a restart past --wait-for-gpus),
        # nor once none came for the job (``scaleup.NodesNotComing``).
        may_wait = self.state.clock.monotonic() < min(self.state.gpus_until, self.state.deadline)
        plan = booking.plan_or_grow(lambda free, gpus: self.kind.plan(free, gpus, ledger.paths), free, self.settings,
                                    may_wait and not self.state.growth_stopped, ledger.volume_claims, ledger.paths)
        self.domains = topology.describe(plan, ledger.paths, self.settings.topology)
        self.dra_nodes = ledger.dra_nodes()
        if new_node_shares(plan):
            self.new_node_place = new_node_place(plan, ledger.labels, self.settings)
        log.info("job %s: free GPUs %s; plan %s", self.settings.job_name, free, format_plan(plan))
        return plan

    def _short(self, short: booking.Short, wait_until: float) -> None:
        """Fail once the wait is over; until then, say (once per change) what is missing."""
        settings = self.settings
        if self.state.clock.monotonic() >= wait_until:
            advice = "" if settings.wait_for_gpus_s else " (use --wait-for-gpus to wait for them)"
            grown = f"; before: {self.state.growth_stopped}" if self.state.growth_stopped else ""
            raise errors.JobFailed(f"{short}{advice}{grown}", exitcodes.INSUFFICIENT_GPUS)
        if str(short) != self.last_shortage:
            log.info("job %s: %s; waiting for GPUs (--wait-for-gpus %.0fs)", settings.job_name, short,
                     settings.wait_for_gpus_s)
            self.last_shortage = str(short)
        # The same shortage again adds to one Event's count (the recorder's series).
        self.reporter.events.record(jobevents.WAITING_FOR_GPUS, f"{short}; waiting up to "
                                    f"{settings.wait_for_gpus_s:.0f}s (--wait-for-gpus)")

    def _wait_for_freed_gpus(self, watch: FreeGpuWatch, seen: int, until: float) -> None:
        """Return once the followed ledger changed since generation ``seen`` and the request
        fits (GPUs freed, a node Ready, uncordoned or untainted), or at ``until``. Pods that
        hold no GPU coming and going never wake it."""
        if watch.wait_until_fits(seen, until):
            log.info("job %s: %d GPUs may be free now; planning again", self.settings.job_name,
                     self.settings.num_gpus)

    def _create_pods(self, plan: Plan) -> None:
        """The workers and the chief, in one burst (under the Lease)."""
        settings = self.settings
        in_domains = f" in {self.domains}" if self.domains else ""
        self.reporter.events.record(jobevents.PLANNED, f"{settings.num_gpus} GPUs on {len(plan)} nodes{in_domains}: "
                                                    f"{format_plan(plan)} (the chief's share last)")
        self.reporter.planned(plan, self.domains)
        _, *objects = gpuclaims.job_objects(settings, plan, JobKeys.generate(settings.job_name), self.attempt.number,
                                            self.new_node_place, self.dra_nodes)
        dra.create_templates(self.kube, objects)
        self.kube.create_all_owned([obj for obj in objects if obj["kind"] == "Pod"])
        if len(plan) > 1:
            self.reporter.events.record(jobevents.WORKERS_CREATED, ", ".join(
                f"{self.attempt.worker(index)} on {node} ({share} GPUs)"
                for index, (node, share) in enumerate(plan[:-1])))
        chief_node, chief_share = plan[-1]
        self.reporter.events.record(
            jobevents.CHIEF_CREATED, f"{self.attempt.chief} on {chief_node} "
                                  f"({chief_share} GPUs): horovodrun -np {settings.num_gpus} over {len(plan)} pods "
                                  "once the workers are Ready")
