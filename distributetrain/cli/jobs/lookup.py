"""Finding jobs by the name they were submitted under, however they were submitted.

A Pod submission's manager pod has the job's name. A Job submission's pod has a
generated name (``<job>-xxxxx``), which is the name the manager gives everything it
creates; its label ``distributetrain.io/job`` still holds the Job's name. A manager
applied from manager.yaml has no such label: its pod's name is the job's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from distributetrain.cli.jobs import state
from distributetrain.cli.jobs.api import JobsKube
from distributetrain.core import errors, names

MANAGER_SELECTOR = f"{names.LABEL_APP}={names.APP},{names.LABEL_ROLE}={names.ROLE_MANAGER}"


@dataclass(frozen=True)
class FoundJob:
    name: str
    namespace: str
    manager: dict | None  # the manager pod; None while (or after) a Job has none
    batch_job: dict | None  # the batch/v1 Job, when submitted --as-job

    @property
    def job_name(self) -> str:
        """The manager's job name: the prefix and label of every object it creates."""
        return self.manager["metadata"]["name"] if self.manager else ""

    @property
    def status(self) -> state.JobStatus:
        return state.from_manager(self.manager) if self.manager else state.from_batch_job(self.batch_job)


def _newest(pods: list[dict]) -> dict:
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))


def _is_manager_object(obj: dict | None) -> bool:
    return obj is not None and (obj["metadata"].get("labels") or {}).get(names.LABEL_ROLE) == names.ROLE_MANAGER


def find_job(kube: JobsKube, namespace: str, name: str) -> FoundJob:
    selector = f"{MANAGER_SELECTOR},{names.LABEL_JOB}={name}"
    pods, _ = kube.list_all("Pod", namespace, label_selector=selector)
    if not pods:
        pod = kube.read("Pod", namespace, name)
        pods = [pod] if _is_manager_object(pod) else []
    batch_job = kube.read("Job", namespace, name)
    if not _is_manager_object(batch_job):
        batch_job = None
    if not pods and batch_job is None:
        raise errors.JobNotFound(f"no job {name!r} in namespace {namespace!r} (see 'distributetrain list')")
    return FoundJob(name, namespace, _newest(pods) if pods else None, batch_job)


def list_jobs(kube: JobsKube, namespace: str | None) -> list[FoundJob]:
    """Every job in ``namespace`` (all namespaces if None), oldest first."""
    pods, _ = kube.list_all("Pod", namespace, label_selector=MANAGER_SELECTOR)
    batch_jobs = {(j["metadata"]["namespace"], j["metadata"]["name"]): j
                  for j in kube.list_all("Job", namespace, label_selector=MANAGER_SELECTOR)[0]}
    managers: dict[tuple[str, str], dict] = {}
    for pod in pods:
        key = (pod["metadata"]["namespace"], state.user_name(pod))
        managers[key] = _newest([pod, managers[key]]) if key in managers else pod
    found = [FoundJob(name, ns, managers.get((ns, name)), batch_jobs.get((ns, name)))
             for ns, name in managers.keys() | batch_jobs.keys()]
    return sorted(found, key=lambda f: (f.namespace, f.status.created or state.EPOCH, f.name))


def job_pods(kube: JobsKube, found: FoundJob) -> dict[str, dict]:
    """The manager pod and every pod it created, by name."""
    pods = {found.job_name: found.manager} if found.manager else {}
    if found.job_name:
        items, _ = kube.list_all("Pod", found.namespace, label_selector=names.job_selector(found.job_name))
        pods.update((p["metadata"]["name"], p) for p in items)
    return pods


def children(found: FoundJob, pods: dict[str, dict]) -> list[dict]:
    return [p for p in pods.values() if found.manager and state.is_child_of(p, found.manager)]
