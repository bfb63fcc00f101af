"""What a job's objects say about it: pure readings, shared by list, status and --follow.

The manager reports on its own pod: its record (``core.job.record``: phase, plan, exit code,
reason, why pods wait) and its termination message. The pod's own status is the fallback (the
manager may not have started, or died too hard to report), and so, for a manager
submitted as a batch/v1 Job whose pod is gone, are the Job's conditions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from distributetrain.cli import jobflags
from distributetrain.core import errors, names, validation
from distributetrain.core.placement import podstate
from distributetrain.core.placement.inventory import TERMINAL_PHASES
from distributetrain.core.job.record import QUEUED, JobRecord

CHIEF_CONTAINER = names.ROLE_CHIEF  # manifests.chief_pod names its container after the role
KIND_POD = "Pod"
KIND_JOB = "Job"
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
EPOCH = datetime.fromtimestamp(0, timezone.utc)  # sorts objects without a timestamp first
JOB_CONDITION_PHASES = {"Complete": "Succeeded", "Failed": "Failed"}
TRAINING = "Training"  # the manager's phase once it saw the chief run
# Not a phase the manager records: its chief ended, it deletes the workers, then records
# the outcome. Its record still says Training meanwhile; the pods say otherwise.
TEARING_DOWN = "TearingDown"
TERMINATING = "Terminating"  # the manager pod is being deleted: the job is cancelled
WORKERS_READY = "Workers Ready"
WORKERS = "Workers"


@dataclass(frozen=True)
class JobStatus:
    name: str  # what the user calls the job: the manager Pod's or the Job's name
    namespace: str
    kind: str  # KIND_POD or KIND_JOB: what was submitted, and what cancel deletes
    manager_pod: str  # "" while a Job has no pod
    phase: str
    gpus: int | None  # planned, else requested; None if unknown
    plan: tuple[tuple[str, int], ...]  # (node, GPUs), the chief's share last
    created: datetime | None
    exit_code: int | None
    reason: str
    waiting: tuple[tuple[str, str], ...] = ()  # (pod, why it is not Ready yet), as the manager last said
    restarts: int = 0  # of --max-restarts, used so far
    last_restart_reason: str = ""  # why the last restart happened
    queue_position: int | None = None  # while Queued, where Kueue's visibility API tells it: 1 is next
    domains: str = ""  # with --topology: the network domains of the plan

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_PHASES


@dataclass(frozen=True)
class Progress:
    """How far the job's pods have come."""

    workers_ready: int
    workers: int  # planned workers (or those that exist, before a plan)
    chief: str  # the chief's phase, "" before it exists
    workers_left: int = 0  # the attempt's worker pods that still exist, Ready or not, terminating too

    @property
    def chief_ended(self) -> bool:
        return self.chief in TERMINAL_PHASES


def _metadata(obj: Mapping) -> Mapping:
    return obj.get("metadata") or {}


def _labels(obj: Mapping) -> Mapping:
    return _metadata(obj).get("labels") or {}


def user_name(manager: Mapping) -> str:
    """The name the job was submitted under (a Job's pod carries it as a label)."""
    return _labels(manager).get(names.LABEL_JOB) or _metadata(manager)["name"]


def is_manager_of(pod: Mapping, name: str) -> bool:
    return _labels(pod).get(names.LABEL_ROLE) == names.ROLE_MANAGER and user_name(pod) == name


def is_child_of(pod: Mapping, manager: Mapping) -> bool:
    """Workers and chief are labelled with the manager pod's name, the manager's job name."""
    labels = _labels(pod)
    return labels.get(names.LABEL_JOB) == _metadata(manager)["name"] and podstate.is_training_pod(pod)


def submitted_as(manager: Mapping) -> str:
    """KIND_JOB for a manager a Job owns (``--as-job``), else KIND_POD."""
    owners = _metadata(manager).get("ownerReferences") or ()
    return KIND_JOB if any(ref.get("kind") == KIND_JOB for ref in owners) else KIND_POD


def _manager_container(pod: Mapping) -> Mapping:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return containers[0]


def requested_gpus(manager: Mapping) -> int | None:
    """--num-gpus of the job's spec, recorded by its manager."""
    spec = JobRecord.of(manager).spec
    return spec.num_gpus if spec is not None else _requested_gpus_in_args(manager)


def _requested_gpus_in_args(manager: Mapping) -> int | None:
    """--num-gpus from the manager's own arguments, read by the manager's own parser: for a
    manager that has not started yet (a Job's template too), or of a release without a spec."""
    container = _manager_container(manager)
    flags, _ = jobflags.split_script_args(container.get("args") or ())
    parser = jobflags.Parser(prog=container.get("name", "manager"))
    jobflags.add_job_flags(parser, require_image=False)
    try:
        args, _ = parser.parse_known_args(flags)
        return validation.positive_int(args.num_gpus)
    except (errors.UsageError, ValueError):
        return None


def _terminated(pod: Mapping) -> Mapping | None:
    return ((podstate.main_container_status(pod) or {}).get("state") or {}).get("terminated")


def phase_of(manager: Mapping) -> str:
    reported = JobRecord.of(manager).phase
    if podstate.is_finished(manager):
        # A manager that died too hard to report still has the pod's verdict.
        return reported if reported in TERMINAL_PHASES else podstate.phase(manager)
    if podstate.is_terminating(manager):
        return TERMINATING
    return reported or podstate.phase(manager)


def exit_code_of(manager: Mapping) -> int | None:
    """The manager container's exit code once it ended, else the one it reported."""
    code = podstate.exit_code(manager)
    if code is not None:
        return code
    return JobRecord.of(manager).exit_code


def reason_of(manager: Mapping) -> str:
    reported = JobRecord.of(manager).reason
    if reported:
        return reported
    terminated = _terminated(manager) or {}
    if terminated.get("message") or terminated.get("reason"):
        return (terminated.get("message") or terminated["reason"]).strip()
    if podstate.phase(manager) == "Pending" and not podstate.is_terminating(manager):
        return podstate.why_not_ready(manager) or "Ready"  # why the manager does not run
    return ""


def waiting_of(manager: Mapping) -> tuple[tuple[str, str], ...]:
    """Why each pod the manager waits on is not Ready; nothing once the manager ended."""
    return () if podstate.is_finished(manager) else JobRecord.of(manager).waiting


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.strptime(text, TIMESTAMP_FORMAT).replace(tzinfo=timezone.utc)


def from_manager(manager: Mapping) -> JobStatus:
    record = JobRecord.of(manager)
    plan = record.plan
    metadata = _metadata(manager)
    phase = phase_of(manager)
    return JobStatus(
        name=user_name(manager),
        namespace=metadata.get("namespace", ""),
        kind=submitted_as(manager),
        manager_pod=metadata["name"],
        phase=phase,
        gpus=sum(share for _, share in plan) if plan else requested_gpus(manager),
        plan=plan,
        created=parse_time(metadata.get("creationTimestamp")),
        exit_code=exit_code_of(manager),
        reason=reason_of(manager),
        waiting=waiting_of(manager),
        restarts=record.restarts,
        last_restart_reason=record.last_restart_reason,
        queue_position=record.queue_position if phase == QUEUED else None,
        domains=record.domains,
    )


def from_batch_job(job: Mapping) -> JobStatus:
    """A Job without a manager pod: not created yet, or deleted with the Job ended."""
    metadata = _metadata(job)
    phase, reason = "Pending", "waiting for the Job controller to create the manager pod"
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("status") == "True" and condition.get("type") in JOB_CONDITION_PHASES:
            phase = JOB_CONDITION_PHASES[condition["type"]]
            reason = condition.get("message") or condition.get("reason", "")
    template = ((job.get("spec") or {}).get("template")) or {}
    return JobStatus(
        name=metadata["name"],
        namespace=metadata.get("namespace", ""),
        kind=KIND_JOB,
        manager_pod="",
        phase=phase,
        gpus=requested_gpus(template),
        plan=(),
        created=parse_time(metadata.get("creationTimestamp")),
        exit_code=None,
        reason=reason,
    )


def progress_of(manager: Mapping, children: Iterable[Mapping]) -> Progress:
    # Only the current attempt's pods: a released attempt's may still be terminating.
    attempt = names.Attempt(manager["metadata"]["name"], JobRecord.of(manager).attempt)
    workers, chief = [], ""
    for pod in children:
        name = pod["metadata"]["name"]
        if name == attempt.chief:
            chief = "Terminating" if podstate.is_terminating(pod) else podstate.phase(pod)
        elif podstate.is_worker_of(pod, attempt):
            workers.append(pod)
    plan = JobRecord.of(manager).plan
    planned = len(plan) - 1 if plan else len(workers)
    return Progress(sum(1 for w in workers if podstate.is_ready(w)), planned, chief, len(workers))


def phase_with_pods(phase: str, progress: Progress) -> str:
    """The job's phase as its pods show it: once its chief ended, a job the manager has not
    recorded an outcome for yet is being torn down, not training."""
    if progress.chief_ended and phase not in (*TERMINAL_PHASES, TERMINATING):
        return TEARING_DOWN
    return phase


def workers_field(progress: Progress, job_ended: bool) -> tuple[str, str]:
    """What the workers are, as a label and a value: how many are Ready while the job may
    still need them; once the chief or the job ended, that they are being or were torn
    down (a finished job's workers are gone, not unready)."""
    if not (job_ended or progress.chief_ended):
        return WORKERS_READY, f"{progress.workers_ready}/{progress.workers}"
    if progress.workers_left:
        return WORKERS, f"{progress.workers_left} of {progress.workers} being torn down"
    if not progress.workers:
        return WORKERS, "none"
    return WORKERS, f"{progress.workers}, torn down after the {'chief' if progress.chief_ended else 'job'} ended"


def format_age(seconds: float) -> str:
    """Coarse, like kubectl: 90s, 12m, 5h, 3d."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
