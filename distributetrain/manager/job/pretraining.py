"""Pre-training: start one attempt of the job, or adopt the one that exists.

The port of the seeds' DistributeTrain_PreTraining.py, in order:
1. pre-flight: every object is validated by a server-side dry run, so bad input
   (missing namespace, invalid image, no permission) fails before anything exists; so
   does a ``--pvc`` claim that does not exist or no pod can mount, and one not bound yet
   is waited for (``volumeclaims``);
2. the job's placement, chosen once (``directplacement``, or ``queueing`` with
   ``--queue``): under the placement Lease (``booking``) the plan, then the pinned
   workers and the chief in one burst, so every GPU of the plan is held from the start
   (the chief's too, through a multi-GB image pull: no other pod can take it meanwhile);
3. wait (watch) until every worker is Ready and the chief is bound to its node, then
   publish the workers' addresses, which the chief asks the manager for (``discovery``).

What happens when the attempt does not start (a pod lost, not Ready in time) is the
job loop's decision (``job``), not this module's: it raises, typed.
"""

from __future__ import annotations

import logging

from distributetrain.core import errors, validation
from distributetrain.core.pods import gang, podgroup, podknobs, podsecurity
from distributetrain.core.placement import gpuclaims, podstate
from distributetrain.core.pods.networkpolicy import job_policies
from distributetrain.core.placement.placement import Plan
from distributetrain.core.placement.scaleup import new_node_shares, planned_node
from distributetrain.core.settings import JobSettings
from distributetrain.core.pods.sshkeys import JobKeys
from distributetrain.kube.client import Kube
from distributetrain.manager.job import earlierruns
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.pods import podchecks
from distributetrain.manager.watching import podwaits
from distributetrain.manager.placement import quotacheck, scaleup, volumeclaims
from distributetrain.manager.placement.directplacement import DirectPlacement
from distributetrain.manager.placement.kinds import JobKind
from distributetrain.manager.watching.nodewatch import NodeWatch
from distributetrain.manager.placement.queueing import QueuedPlacement
from distributetrain.manager.reporting.reporting import PodWaits
from distributetrain.manager.processstate import ProcessState
from distributetrain.manager.watching.startwatch import StartWatch
from distributetrain.manager.watching.teardown import tear_down

log = logging.getLogger(__name__)

PREFLIGHT_DRA_NODE = "preflight-dra-node"


def job_pods(kube: Kube, settings: JobSettings) -> dict[str, dict]:
    """This manager's pods of the job (never those of an earlier run of the same name)."""
    items, _ = kube.list_all("Pod", settings.namespace, label_selector=settings.selector)
    return {p["metadata"]["name"]: p for p in items}


def preflight(kube: Kube, settings: JobSettings) -> None:
    """Server-side dry run of every kind of object the job creates; nothing is persisted."""
    if not settings.discovery_url:
        raise errors.UsageError("MANAGER_POD_IP", "the chief asks the manager for its hosts: set it to the manager "
                                                  "pod's address (downward API status.podIP, as manager.yaml does)")
    namespace = kube.read("Namespace", None, settings.namespace)
    if namespace is None:
        raise errors.UsageError("--namespace", f"namespace {settings.namespace!r} does not exist")
    level = validation.host_network_refused_by(namespace["metadata"].get("labels") or {})
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
    if not settings.queue and kube.serves_pod_groups():  # a direct attempt's pods are a gang (``core.pods.gang``)
        objects = gang.job_objects(settings, objects, 0)
    for obj in objects:
        try:
            admitted_as = kube.create_owned(obj, dry_run=True)
        except errors.Forbidden as e:
            if obj["kind"] != gang.KIND:
                raise
            kube.refuse_pod_groups(str(e))
            continue
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


Placement = DirectPlacement | QueuedPlacement


def placement_of(kube: Kube, state: ProcessState, kind: JobKind) -> Placement:
    """How each attempt of the job gets its GPUs: through a Kueue queue (``--queue``), or directly."""
    return (QueuedPlacement if state.settings.queue else DirectPlacement)(kube, state, kind)


class AttemptNotStarted(errors.DistributeTrainError):
    """The attempt's pods did not all start within --worker-ready-timeout."""

    def __init__(self, waiting_for: dict[str, str]):
        self.waiting_for = waiting_for  # pod name -> why it is not there yet
        super().__init__("; ".join(f"{pod}: {why}" for pod, why in waiting_for.items()))


class PreTraining:
    """Start the current attempt: adopt its pods, or plan and create them."""

    def __init__(self, kube: Kube, state: ProcessState, placement: Placement):
        self.kube = kube
        self.state = state
        self.placement = placement  # chosen once, by the job's loop
        self.settings = state.settings
        self.reporter = state.reporter
        self.attempt = state.attempt

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
            plan = self.placement.place()
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
                outcome = starting.wait(self.state.pods, podwaits.attempt_started(chief, workers), [*workers, chief],
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
        return self.placement.adopt(plan, chief)
