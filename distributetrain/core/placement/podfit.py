"""How many GPUs of a node a job can use: as many as a pod of the job with that share fits.

A share goes on a node only as far as the pod holding it fits the node's room besides
its GPUs (CPU, memory, ephemeral storage, a pod slot: ``podrequests``), and, on a node
whose GPU units share devices (``gpusharing``), only one rank of the job unless allowed.
The planner (``placement``) stays pure and GPU-only: it gets, per node, the largest share
that fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from distributetrain.core.pods import manifests
from distributetrain.core import names
from distributetrain.core.placement.gpusharing import SharedUnits
from distributetrain.core.placement.podrequests import FIT_RESOURCES, Amounts, pod_requests
from distributetrain.core.settings import JobSettings

SHARED = "shared"  # the limit named when a node's shared GPU units cap a share


@dataclass(frozen=True)
class PodShape:
    """What a job pod of ``share`` GPUs requests: ``fixed`` plus ``share`` times ``per_gpu``."""

    per_gpu: Mapping[str, int]
    fixed: Mapping[str, int]

    @classmethod
    def of_job(cls, settings: JobSettings) -> PodShape:
        """Measured on the job's own manifests, the worker's and the chief's (whichever
        asks more), so the fit follows whatever the builders put in a pod."""
        one, two = _job_pod_requests(settings, 1), _job_pod_requests(settings, 2)
        per_gpu = {resource: two[resource] - one[resource] for resource in FIT_RESOURCES}
        return cls(per_gpu, {resource: one[resource] - per_gpu[resource] for resource in FIT_RESOURCES})

    def requests(self, share: int) -> Amounts:
        return {resource: self.fixed[resource] + share * self.per_gpu[resource] for resource in FIT_RESOURCES}

    def largest_share(self, room: Mapping[str, int], most: int) -> tuple[int, str | None]:
        """The largest share up to ``most`` whose pod fits ``room`` (a resource not in it is
        no limit), and the resource that caps it below ``most`` (None if none does)."""
        share, limit = most, None
        for resource, left in room.items():
            per_gpu, fixed = self.per_gpu.get(resource, 0), self.fixed.get(resource, 0)
            fits = (left - fixed) // per_gpu if per_gpu > 0 else (most if left >= fixed else -1)
            if max(fits, 0) < share:
                share, limit = max(fits, 0), resource
        return share, limit


def _job_pod_requests(settings: JobSettings, share: int) -> Amounts:
    # As admitted: the RuntimeClass's overhead (--runtime-class) is the pod's too.
    overhead = {"overhead": dict(settings.runtime_class_terms.overhead)}
    worker = pod_requests({**manifests.worker_pod(settings, 0, None, share)["spec"], **overhead})
    chief = pod_requests({**manifests.chief_pod(settings, None, share)["spec"], **overhead})
    return {resource: max(worker[resource], chief[resource]) for resource in FIT_RESOURCES}


@dataclass(frozen=True)
class JobFit:
    """What the inventory needs to know of a job to say how much of each node it can use."""

    shape: PodShape
    allow_shared: bool = False  # --allow-shared-gpus: any share on nodes of shared GPU units
    own_labels: Mapping[str, str] = field(default_factory=dict)  # labels every pod of this run of the job carries

    @classmethod
    def of_job(cls, settings: JobSettings) -> JobFit:
        own = {names.LABEL_JOB: settings.job_name, **({names.LABEL_OWNER_UID: settings.owner_uid}
                                                       if settings.owner_uid else {})}
        return cls(PodShape.of_job(settings), settings.allow_shared_gpus, own)

    def is_own(self, labels: Mapping[str, str]) -> bool:
        return bool(self.own_labels) and all(labels.get(k) == v for k, v in self.own_labels.items())

    def usable(self, gpus: int, room: Mapping[str, int], shared: SharedUnits | None,
               has_own_pod: bool) -> tuple[int, str | None]:
        """Of ``gpus`` free on a node, how many one pod of the job can take, and what
        caps it below ``gpus``: a resource of the node's room, or SHARED."""
        most, limit = gpus, None
        if shared and (shared.one_per_container or not self.allow_shared):
            # One rank of the job per node of shared units: one GPU, none if it has one already.
            cap = 0 if has_own_pod else 1
            if cap < most:
                most, limit = cap, SHARED
        share, resource = self.shape.largest_share(room, most)
        return share, resource or limit
