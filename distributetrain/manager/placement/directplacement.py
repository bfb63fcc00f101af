"""An attempt placed by the manager itself (no ``--queue``): planned on the free GPUs and
created pinned, in one burst under the placement Lease, waiting for GPUs while
``--wait-for-gpus`` allows (``placing``)."""

from __future__ import annotations

import logging

from distributetrain.core import errors, exitcodes
from distributetrain.core.pods import gang, manifests
from distributetrain.core.placement import inventory
from distributetrain.core.placement.placement import Plan, describe_free, format_plan
from distributetrain.core.pods.sshkeys import JobKeys
from distributetrain.kube import dra
from distributetrain.kube.client import Kube
from distributetrain.manager.placement import booking, placing
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.pods import networkpolicy
from distributetrain.manager.placement.kinds import JobKind
from distributetrain.manager.processstate import ProcessState

log = logging.getLogger(__name__)


class DirectPlacement:
    """Book each attempt's GPUs (``booking``), waiting for GPUs while allowed."""

    def __init__(self, kube: Kube, state: ProcessState, kind: JobKind):
        self.kube = kube
        self.state = state
        self.kind = kind  # the plan's shape
        self.settings = state.settings
        self.last_shortage = ""  # logged once per change
        self.planned = placing.Planned([])  # the plan being booked
        self.keys_created = False  # the attempt's Secret and the job's NetworkPolicies, made before its first Lease
        self.keys: JobKeys | None = None  # the attempt's, in its Secret: its pods' objects are built with them

    def place(self) -> Plan:
        """The attempt's plan, its pods created; raise ``JobFailed`` (69) once the wait is over.

        The first booking shares a survey of the cluster with the managers starting with it;
        one woken by GPUs freed surveys again (``booking.survey``). A busy Lease is tried for
        as long as the job may wait for GPUs (LOCK_TIMEOUT_S at least)."""
        self.keys_created = False
        wait_until = min(self.state.gpus_until, self.state.deadline)
        with placing.FreeGpuBooking(self.kube, self.settings, self.state.clock) as free_gpus:
            booked = free_gpus.book(self._choose, self._create_pods, wait_until, self._waiting, shared_survey=True,
                                    surveyed_hook=self._before_the_lease,
                                    before_each=lambda: self.state.reporter.phase("Planning"))
        if isinstance(booked, booking.Short):
            self._give_up(booked)
        self._say_created(booked)
        return booked

    def adopt(self, plan: Plan, chief: dict) -> Plan:
        """An attempt's pods found whole (a restarted manager, or post-training): created placed."""
        log.info("job %s: adopting attempt %d, plan %s", self.settings.job_name, self.state.attempt.number,
                 format_plan(plan))
        return plan

    def _before_the_lease(self, surveyed: inventory.GpuLedger) -> None:
        """What no other manager waits on: the request checked against the survey (bad
        input creates nothing), then the attempt's SSH keys and the job's NetworkPolicies."""
        booking.check_request(surveyed, self.settings)
        self.kube.serves_pod_groups()  # decided here, once, not under the Lease
        if not self.keys_created:
            self.keys = JobKeys.generate(self.settings.job_name)
            self.kube.create_owned(manifests.ssh_secret(self.settings, self.keys))
            networkpolicy.isolate(self.kube, self.settings)
            self.keys_created = True

    def _choose(self, ledger: inventory.GpuLedger) -> Plan:
        # Under the Lease: the request was checked on these nodes before it (``_before_the_lease``).
        # No node is added for an attempt that could not wait for it (a restart past --wait-for-gpus),
        # nor once none came for the job (``scaleup.NodesNotComing``).
        may_wait = self.state.clock.monotonic() < min(self.state.gpus_until, self.state.deadline)
        self.planned = placing.plan_attempt(self.kind, ledger, self.settings,
                                            may_wait and not self.state.growth_stopped)
        log.info("job %s: free GPUs %s; plan %s", self.settings.job_name, describe_free(ledger.free()),
                 format_plan(self.planned.plan))
        return self.planned.plan

    def _give_up(self, short: booking.Short) -> None:
        settings = self.settings
        advice = "" if settings.wait_for_gpus_s else " (use --wait-for-gpus to wait for them)"
        grown = f"; before: {self.state.growth_stopped}" if self.state.growth_stopped else ""
        raise errors.JobFailed(f"{short}{advice}{grown}", exitcodes.INSUFFICIENT_GPUS)

    def _waiting(self, short: booking.Short) -> None:
        """Say (once per change) what is missing, while the job waits for GPUs."""
        settings = self.settings
        if str(short) != self.last_shortage:
            log.info("job %s: %s; waiting for GPUs (--wait-for-gpus %.0fs)", settings.job_name, short,
                     settings.wait_for_gpus_s)
            self.last_shortage = str(short)
        # The same shortage again adds to one Event's count (the recorder's series).
        self.state.reporter.events.record(jobevents.WAITING_FOR_GPUS, f"{short}; waiting up to "
                                          f"{settings.wait_for_gpus_s:.0f}s (--wait-for-gpus)")
        self.state.reporter.phase("WaitingForGPUs")

    def _create_pods(self, plan: Plan) -> list[dict]:
        """The workers and the chief, in one burst (under the Lease: no other request is
        here, every other manager waits on it; Events are sent in the background)."""
        settings = self.settings
        domains = self.planned.domains
        in_domains = f" in {domains}" if domains else ""
        self.state.reporter.events.record(jobevents.PLANNED, f"{settings.num_gpus} GPUs on {len(plan)} nodes"
                                                             f"{in_domains}: {format_plan(plan)} (the chief's share last)")
        _, *objects = placing.attempt_objects(settings, self.planned, self.keys,  # no new keys under the Lease
                                              self.state.attempt.number, self.kube.serves_pod_groups())
        dra.create_templates(self.kube, objects)
        for group in (obj for obj in objects if obj["kind"] == gang.KIND):
            self.kube.create_owned(group)
        created = self.kube.create_all_owned([obj for obj in objects if obj["kind"] == "Pod"])
        self.state.pods.relist()  # the start judged on a store that holds them
        return created

    def _say_created(self, plan: Plan) -> None:
        """Once the Lease is let go: the plan on the manager pod, and the Events of its pods."""
        settings, attempt, reporter = self.settings, self.state.attempt, self.state.reporter
        reporter.planned(plan, self.planned.domains)
        if len(plan) > 1:
            reporter.events.record(jobevents.WORKERS_CREATED, ", ".join(
                f"{attempt.worker(index)} on {node} ({share} GPUs)" for index, (node, share) in enumerate(plan[:-1])))
        chief_node, chief_share = plan[-1]
        reporter.events.record(
            jobevents.CHIEF_CREATED, f"{attempt.chief} on {chief_node} "
                                     f"({chief_share} GPUs): horovodrun -np {settings.num_gpus} over {len(plan)} pods "
                                     "once the workers are Ready")
