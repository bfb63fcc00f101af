"""Pre-training: plan the GPUs, create the workers, then the chief.

The port of the seeds' DistributeTrain_PreTraining.py, in order:
1. pre-flight: every object is validated by a server-side dry run, so bad input
   (missing namespace, invalid image, no permission) fails before anything exists;
2. under the placement Lease: inventory, plan, reserve the chief's share on the
   manager pod, create the SSH Secret and the pinned workers;
3. wait (watch) until every worker is Ready; if they are not Ready in time (someone
   took the GPUs, a node died), release everything and re-plan while
   ``--wait-for-gpus`` lasts, else fail with the reasons. A worker lost meanwhile
   (deleted, failed, its node not Ready: ``nodewatch``) is a restart while
   ``--max-restarts`` allows (``restarts``), else exit 71;
4. create the chief with the workers' addresses, and drop the reservation.

A restarted manager adopts what exists: a chief means nothing is left to do; workers
with a recorded reservation are waited on again, never planned twice.
"""

from __future__ import annotations

import logging
import time

from distributetrain import errors, events, exitcodes, inventory, manifests, names, placement, podstate, restarts, waits
from distributetrain.kube import Kube
from distributetrain.lock import PlacementLock
from distributetrain.nodewatch import NodeWatch
from distributetrain.placement import format_plan
from distributetrain.reporting import PodWaits, Reporter
from distributetrain.settings import JobSettings
from distributetrain.sshkeys import JobKeys
from distributetrain.teardown import tear_down

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 120.0
GPU_RECHECK_S = 10.0  # while waiting for GPUs, re-plan at least this often (nodes coming back)
REPLAN_MIN_INTERVAL_S = 1.0  # and at most this often, however busy the cluster's pods are
DRY_RUN_ADDRESS = "192.0.2.1"  # TEST-NET-1: a placeholder worker address for the dry run


def job_pods(kube: Kube, settings: JobSettings) -> dict[str, dict]:
    items, _ = kube.list_all("pods", settings.namespace, label_selector=names.job_selector(settings.job_name))
    return {p["metadata"]["name"]: p for p in items}


def take_inventory(kube: Kube, settings: JobSettings) -> tuple[inventory.GpuLedger, str]:
    """Free GPUs per candidate node, and the pod list's resourceVersion (to watch from)."""
    ledger = inventory.GpuLedger(settings.gpu_resource, settings.owner_uid)
    selector = dict(settings.node_selector)
    for page, _ in kube.list_pages("nodes"):
        for node in page:
            ledger.add_node(node, settings.tolerations, selector)
    version = ""
    # Terminal pods hold nothing; the server filters them out of the (possibly huge) list.
    for page, version in kube.list_pages("pods", field_selector="status.phase!=Succeeded,status.phase!=Failed"):
        for pod in page:
            ledger.add_pod(pod)
    return ledger, version


def preflight(kube: Kube, settings: JobSettings) -> None:
    """Server-side dry run of every kind of object the job creates; nothing is persisted."""
    if settings.elastic and not settings.discovery_url:
        raise errors.UsageError("--elastic", "needs the manager pod's address in $MANAGER_POD_IP (downward API "
                                             "status.podIP, as manager.yaml sets it)")
    if not kube.namespace_exists(settings.namespace):
        raise errors.UsageError("--namespace", f"namespace {settings.namespace!r} does not exist")
    keys = JobKeys.generate(settings.job_name)
    probe_plan = [("preflight-node", 1), ("preflight-node", 1)]
    objects = manifests.job_objects(settings, probe_plan, keys, [DRY_RUN_ADDRESS])
    for obj in objects:
        try:
            kube.create_owned(obj, dry_run=True)
        except errors.NotFound as e:
            raise errors.UsageError("--namespace", f"namespace {settings.namespace!r} does not exist ({e})") from e
        except errors.Invalid as e:
            raise errors.UsageError("job settings", f"the API server rejects the job's {obj['kind']}: {e}") from e


def check_request(ledger: inventory.GpuLedger, settings: JobSettings) -> None:
    """Requests no cluster state could ever satisfy are bad input, not a wait."""
    if not ledger.advertised:
        raise errors.UsageError("--gpu-resource", f"no node in the cluster advertises {settings.gpu_resource!r}")
    # Cordoned, NotReady or tainted nodes may come back (--wait-for-gpus waits for them):
    # only more GPUs than every node the selector allows advertises is never satisfiable.
    if settings.num_gpus > ledger.selectable:
        where = "the nodes matching --node-selector" if settings.node_selector else "the cluster's nodes"
        raise errors.UsageError(
            "--num-gpus", f"requested {settings.num_gpus} GPUs but {where} advertise {ledger.selectable} in all")


class PreTraining:
    def __init__(self, kube: Kube, settings: JobSettings, reporter: Reporter, deadline: float):
        self.kube = kube
        self.settings = settings
        self.reporter = reporter
        self.deadline = deadline  # monotonic; the job's --active-deadline

    def run(self) -> None:
        pods = job_pods(self.kube, self.settings)
        chief = names.chief_name(self.settings.job_name, self.settings.attempt)
        if chief in pods:
            log.info("job %s already has its chief; adopting it", self.settings.job_name)
            return
        plan = self._adopt(pods)
        if plan is None:
            preflight(self.kube, self.settings)
        give_up_at = time.monotonic() + self.settings.wait_for_gpus_s
        while True:
            if plan is None:
                plan = self._place(give_up_at)
            workers = [names.worker_name(self.settings.job_name, i, self.settings.attempt) for i in range(len(plan) - 1)]
            self.reporter.phase("StartingWorkers")
            ready_by = min(time.monotonic() + self.settings.worker_ready_timeout_s, self.deadline)
            pod_waits = PodWaits(self.reporter, workers)
            try:
                # A worker's node lost while it starts: deleted at once, a loss like any other.
                with NodeWatch(self.kube, self.settings, self.reporter):
                    outcome = waits.watch_job(
                        self.kube, self.settings.namespace, self.settings.job_name,
                        pod_waits.watching(waits.workers_ready(workers)), ready_by, workers,
                    )
            finally:
                pod_waits.done()
            if isinstance(outcome, waits.WorkersReady):
                if workers:
                    self.reporter.events.record(events.WORKERS_READY, f"{len(workers)} of {len(workers)} Ready: "
                                                + ", ".join(f"{w} ({outcome.addresses[w]})" for w in workers))
                break
            if isinstance(outcome, waits.PodLost):
                lost = errors.PodLost(f"worker {outcome.pod} {outcome.reason} before training started",
                                      exitcodes.WORKER_LOST)
                settings = restarts.next_attempt(self.kube, self.settings, self.reporter, self.deadline, lost)
                if settings is None:
                    raise lost
                self.settings = settings
                plan = None
                continue
            reasons = "; ".join(f"{pod}: {why}" for pod, why in outcome.waiting_for.items())
            tear_down(self.kube, self.settings, keep_chief=False)
            self.reporter.release_reservation()
            give_up = time.monotonic() >= min(give_up_at, self.deadline)
            self.reporter.events.record(
                events.RELEASED,
                f"workers not Ready within {self.settings.worker_ready_timeout_s:.0f}s ({reasons}); released them"
                + ("" if give_up else " and planning again"),
            )
            if give_up:
                raise errors.JobFailed(
                    f"workers not Ready within {self.settings.worker_ready_timeout_s:.0f}s; released them ({reasons})",
                    exitcodes.TIMED_OUT,
                )
            log.warning("workers not Ready in time (%s); released them and planning again", reasons)
            self._next_attempt()
            plan = None
        self._create_chief(plan, [outcome.addresses[w] for w in workers])

    def _next_attempt(self) -> None:
        """The next plan's pods get new names: a released pod may still be terminating."""
        self.settings = self.settings.replace(attempt=self.settings.attempt + 1)
        self.reporter.record_attempt(self.settings.attempt)

    def _adopt(self, pods: dict[str, dict]) -> list[tuple[str, int]] | None:
        job, attempt = self.settings.job_name, self.settings.attempt
        workers = sorted(
            (p for p in pods.values() if names.is_worker_of(p, job, attempt) and not podstate.is_terminating(p)),
            key=names.worker_index,
        )
        reservation = self.reporter.reservation()
        if reservation is None:
            if workers:
                # Workers without a recorded chief share: cannot resume safely, so start over.
                log.warning("job %s has workers but no reservation; releasing them", self.settings.job_name)
                tear_down(self.kube, self.settings, keep_chief=False)
            return None
        if not workers and self.kube.read("Secret", self.settings.namespace, names.secret_name(self.settings.job_name)) is None:
            return None
        plan = [
            (inventory.pinned_node(w["spec"]) or podstate.node(w), names.gpus_of(w))
            for w in workers
        ] + [reservation]
        if sum(share for _, share in plan) != self.settings.num_gpus:
            log.warning("job %s: existing pods do not match the request; starting over", self.settings.job_name)
            tear_down(self.kube, self.settings, keep_chief=False)
            self.reporter.release_reservation()
            return None
        log.info("job %s: adopting existing workers, plan %s", self.settings.job_name, format_plan(plan))
        return plan

    def _place(self, give_up_at: float) -> list[tuple[str, int]]:
        """Plan and create the workers under the Lease; wait for GPUs while allowed."""
        settings = self.settings
        last_shortage = ""
        next_plan_at = 0.0
        while True:
            time.sleep(max(0.0, next_plan_at - time.monotonic()))
            next_plan_at = time.monotonic() + REPLAN_MIN_INTERVAL_S
            self.reporter.phase("Planning")
            with PlacementLock(self.kube, settings.lease_namespace, f"{settings.namespace}/{settings.job_name}",
                               LOCK_TIMEOUT_S, names.LOCK_LEASE_NAME):
                ledger, version = take_inventory(self.kube, settings)
                check_request(ledger, settings)
                free = ledger.free()
                try:
                    plan = placement.plan(free, settings.num_gpus)
                    if settings.elastic:
                        plan = placement.with_a_worker(plan)
                except placement.InsufficientGPUs as e:
                    shortage = e
                else:
                    log.info("job %s: free GPUs %s; plan %s", settings.job_name, free, format_plan(plan))
                    self.reporter.events.record(
                        events.PLANNED, f"{settings.num_gpus} GPUs on {len(plan)} nodes: {format_plan(plan)} "
                                        "(the chief's share last)")
                    self.reporter.reserve(plan)
                    self._create_workers(plan)
                    return plan
            shortage_text = f"{shortage}; unavailable: {ledger.unavailable()}"
            if time.monotonic() >= min(give_up_at, self.deadline):
                raise errors.JobFailed(
                    shortage_text + ("" if settings.wait_for_gpus_s else " (use --wait-for-gpus to wait for them)"),
                    exitcodes.INSUFFICIENT_GPUS,
                )
            if shortage_text != last_shortage:
                log.info("job %s: %s; waiting for GPUs (--wait-for-gpus %.0fs)", settings.job_name, shortage_text,
                         settings.wait_for_gpus_s)
                last_shortage = shortage_text
            # The same shortage again adds to one Event's count (the recorder's series).
            self.reporter.events.record(
                events.WAITING_FOR_GPUS, f"{shortage_text}; waiting up to {settings.wait_for_gpus_s:.0f}s (--wait-for-gpus)")
            self.reporter.phase("WaitingForGPUs")
            self._wait_for_freed_gpus(ledger, version, min(GPU_RECHECK_S, give_up_at - time.monotonic()))

    def _wait_for_freed_gpus(self, ledger: inventory.GpuLedger, version: str, timeout_s: float) -> None:
        """Return at the first pod event that can free GPUs on a candidate node, or after
        ``timeout_s`` (which also catches nodes coming back: uncordoned, Ready again)."""
        give_up_at = time.monotonic() + max(timeout_s, 0.1)
        try:
            for kind, pod in self.kube.watch_pods(None, version, max(timeout_s, 1)):
                if ledger.freed_by(kind, pod) or time.monotonic() >= give_up_at:
                    return
        except (errors.Gone, errors.TransientApiError):
            return

    def _create_workers(self, plan: list[tuple[str, int]]) -> None:
        settings = self.settings
        keys = JobKeys.generate(settings.job_name)
        self.kube.create_owned(manifests.ssh_secret(settings, keys))
        self.kube.create_all_owned(
            [manifests.worker_pod(settings, index, node, share) for index, (node, share) in enumerate(plan[:-1])]
        )
        if len(plan) > 1:
            self.reporter.events.record(events.WORKERS_CREATED, ", ".join(
                f"{names.worker_name(settings.job_name, index, settings.attempt)} on {node} ({share} GPUs)"
                for index, (node, share) in enumerate(plan[:-1])))

    def _create_chief(self, plan: list[tuple[str, int]], addresses: list[str]) -> None:
        chief_node, chief_share = plan[-1]
        hosts = [(address, share) for address, (_, share) in zip(addresses, plan[:-1])]
        self.kube.create_owned(manifests.chief_pod(self.settings, chief_node, chief_share, hosts))
        self.reporter.events.record(
            events.CHIEF_CREATED, f"{names.chief_name(self.settings.job_name, self.settings.attempt)} on {chief_node} ({chief_share} GPUs): "
                                  f"horovodrun -np {self.settings.num_gpus} over {len(plan)} pods")
        self.reporter.release_reservation()
        self.reporter.phase("Running")
