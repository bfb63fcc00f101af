"""What differs between a static job and an elastic one (``--elastic``), decided once,
by the job's loop (``kind_of``): the shape of an attempt's plan, and how training is
followed from the chief's start to its end."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from distributetrain.core.placement import placement, topology
from distributetrain.core.placement.placement import Plan
from distributetrain.core.settings import JobSettings
from distributetrain.kube.client import Kube
from distributetrain.manager.watching import podwaits
from distributetrain.manager.placement.elastic import ElasticFollower
from distributetrain.manager.processstate import ProcessState


@dataclass(frozen=True)
class StaticJob:
    """Every worker is needed from the chief's start to its end: losing one loses the attempt."""

    levels: tuple[topology.Level, ...] = ()  # --topology

    def plan(self, free: Mapping[str, int], gpus: int, paths: Mapping[str, topology.Path] = {}) -> Plan:
        """On the fewest network domains (``paths``: each node's, with --topology), the chief's share last."""
        return topology.plan(free, gpus, paths, self.levels)

    def follow(self, kube: Kube, state: ProcessState, chief: str, workers: list[str]) -> podwaits.Outcome:
        pods = state.pods
        outcome = podwaits.watch_job(pods, podwaits.chief_finished(chief, workers), state.deadline, [chief, *workers])
        if isinstance(outcome, podwaits.ChiefFinished) and outcome.exit_code != 0 and workers:
            # A worker lost under the chief is the cause, if its status says so in time.
            until = min(state.deadline, state.clock.monotonic() + podwaits.WORKER_STATUS_LAG_S)
            lost = podwaits.watch_job(pods, podwaits.worker_lost(workers), until, workers)
            if isinstance(lost, podwaits.PodLost):
                return lost
        return outcome


@dataclass(frozen=True)
class ElasticJob:
    """Workers come and go while training goes on (``elastic``)."""

    levels: tuple[topology.Level, ...] = ()  # --topology

    def plan(self, free: Mapping[str, int], gpus: int, paths: Mapping[str, topology.Path] = {}) -> Plan:
        return placement.with_a_worker(topology.plan(free, gpus, paths, self.levels))

    def follow(self, kube: Kube, state: ProcessState, chief: str, workers: list[str]) -> podwaits.Outcome:
        return ElasticFollower(kube, state).follow()


JobKind = StaticJob | ElasticJob


def kind_of(settings: JobSettings) -> JobKind:
    return ElasticJob(settings.topology) if settings.elastic else StaticJob(settings.topology)
