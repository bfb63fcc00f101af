"""ResourceQuotas whose hard limit can never hold the job: bad input, not a refusal later.

Where a quota's hard limit is below what the whole job requests, no wait and no other
tenant leaving would help: the job is bad input, named by the flag that makes it too
large. What the quota has used so far is not counted there: that may free up, and a
refusal for it ("exceeded quota") is waited out with ``--wait-for-gpus``: ``shortfalls``
says what is missing, ``used_at_refusal`` what the refusal saw, so the wait ends when
those figures change. The job is counted at its smallest: all its GPUs in one pod
(``podfit.PodShape``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from distributetrain.core import quantity
from distributetrain.core.placement.podfit import PodShape
from distributetrain.core.placement.podrequests import CPU, MEMORY, PODS, amount
from distributetrain.core.settings import JobSettings


@dataclass(frozen=True)
class QuotaExceeded:
    """One hard limit the job's pods exceed on their own."""

    flag: str  # what to change
    quota: str  # the ResourceQuota's name
    key: str  # the hard limit's name, e.g. "requests.cpu"
    hard: int  # in the resource's whole unit (millicores for cpu)
    needed: int

    def __str__(self) -> str:
        unit = quantity.format_cpu if self.key.endswith(CPU) else (
            quantity.format_memory if self.key.endswith(MEMORY) else str)
        return (f"the job's pods request {self.key} {unit(self.needed)} at least, but ResourceQuota {self.quota!r} "
                f"allows {unit(self.hard)}")


def job_totals(settings: JobSettings) -> dict[str, tuple[str, str, int]]:
    """Each quota key the job's pods count against: (resource, flag, the least they request)."""
    requests = PodShape.of_job(settings).requests(settings.num_gpus)  # one pod: the least the job can be
    cpu, memory = ("--cpu-per-gpu", requests[CPU]), ("--memory-per-gpu", requests[MEMORY])
    # Memory is each pod's limit too (manifests), the request unless --memory-limit-per-gpu.
    memory_limit = ("--memory-limit-per-gpu" if settings.memory_limit_per_gpu_bytes else "--memory-per-gpu",
                    settings.memory_limit_per_gpu * settings.num_gpus)
    cpu_limit = {"limits.cpu": (CPU, "--cpu-limit-per-gpu", settings.cpu_limit_per_gpu_m * settings.num_gpus)
                 } if settings.cpu_limit_per_gpu_m else {}
    return {
        "pods": (PODS, "--num-gpus", requests[PODS]), "count/pods": (PODS, "--num-gpus", requests[PODS]),
        "cpu": (CPU, *cpu), "requests.cpu": (CPU, *cpu), **cpu_limit,
        "memory": (MEMORY, *memory), "requests.memory": (MEMORY, *memory), "limits.memory": (MEMORY, *memory_limit),
        f"requests.{settings.gpu_resource}": (settings.gpu_resource, "--num-gpus", settings.num_gpus),
    }


def applies_to_job_pods(quota: Mapping, settings: JobSettings) -> bool:
    """Whether the quota's scopes select the job's pods: Burstable, of ``--pod-priority-class``
    (or none), terminating (activeDeadlineSeconds) only with ``--active-deadline``. A scope
    not known here selects nothing, so an unknown quota is never taken for a limit."""
    spec = quota.get("spec") or {}
    scopes = [(scope, "Exists", ()) for scope in spec.get("scopes") or ()] + [
        (term.get("scopeName"), term.get("operator"), term.get("values") or ())
        for term in (spec.get("scopeSelector") or {}).get("matchExpressions") or ()]
    matches = {"Terminating": bool(settings.active_deadline_s), "NotTerminating": not settings.active_deadline_s,
               "BestEffort": False, "NotBestEffort": True}
    for scope, operator, values in scopes:
        if scope == "PriorityClass":
            if not _priority_class_selected(settings.pod_priority_class, operator, values):
                return False
        elif scope not in matches or matches[scope] != (operator != "DoesNotExist"):
            return False
    return True


def _priority_class_selected(priority_class: str, operator: str, values) -> bool:
    """The quota scope's rule for a pod's priorityClassName ("": the pod names none)."""
    if operator == "Exists":
        return bool(priority_class)
    if operator == "DoesNotExist":
        return not priority_class
    if operator == "In":
        return bool(priority_class) and priority_class in values
    return operator == "NotIn" and priority_class not in values


def exceeded(quotas: list[Mapping], settings: JobSettings) -> QuotaExceeded | None:
    """The first hard limit the job's pods could never fit in, if any."""
    totals = job_totals(settings)
    for quota in quotas:
        if not applies_to_job_pods(quota, settings):
            continue
        for key, limit in sorted(((quota.get("spec") or {}).get("hard") or {}).items()):
            if key in totals:
                resource, flag, needed = totals[key]
                hard = amount(resource, limit)
                if needed > hard:
                    return QuotaExceeded(flag, quota["metadata"]["name"], key, hard, needed)
    return None


# The API server's words: "exceeded quota: NAME, requested: K=V,K=V, used: K=V,K=V, limited: K=V".
USED_AT_REFUSAL = re.compile(r"\bused: (\S+), limited: ")


def used_at_refusal(message: str) -> dict[str, str]:
    """What a quota had used when it refused (key -> quantity), from its message; {} if unsaid."""
    found = USED_AT_REFUSAL.search(message)
    return dict(term.split("=", 1) for term in found.group(1).split(",") if "=" in term) if found else {}


def shortfalls(quota: Mapping, settings: JobSettings) -> list[str]:
    """Each hard limit the job does not fit in beside what the quota uses now, as
    "requests.nvidia.com/gpu used 6 of 8, the job needs 4"; [] if it may fit."""
    totals = job_totals(settings)
    status = quota.get("status") or {}
    used = status.get("used") or {}
    missing = []
    for key, limit in sorted((status.get("hard") or {}).items()):
        if key in totals:
            resource, _, needed = totals[key]
            hard, taken = amount(resource, limit), amount(resource, used.get(key, "0"))
            if taken + needed > hard:
                missing.append(f"{key} used {used.get(key, '0')} of {limit}, the job needs {_shown(resource, needed)}")
    return missing


def _shown(resource: str, needed: int) -> str:
    return quantity.format_cpu(needed) if resource == CPU else (
        quantity.format_memory(needed) if resource == MEMORY else str(needed))
