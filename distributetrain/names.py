"""Every name and label the job uses, in one place (never string literals in logic)."""

from __future__ import annotations

DOMAIN = "distributetrain.io"
LABEL_APP = "app.kubernetes.io/name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB = f"{DOMAIN}/job"
LABEL_ROLE = f"{DOMAIN}/role"
LABEL_WORKER_INDEX = f"{DOMAIN}/worker-index"
APP = "distributetrain"

ROLE_WORKER = "worker"
ROLE_CHIEF = "chief"
ROLE_MANAGER = "manager"

# Annotations the manager keeps on its own pod: what `distributetrain status` reads,
# and the chief's GPUs held for it between worker creation and chief creation.
ANNOTATION_PHASE = f"{DOMAIN}/phase"
ANNOTATION_PLAN = f"{DOMAIN}/plan"
ANNOTATION_EXIT_CODE = f"{DOMAIN}/exit-code"
ANNOTATION_REASON = f"{DOMAIN}/reason"
ANNOTATION_RESERVATION = f"{DOMAIN}/reservation"
ANNOTATION_GPUS = f"{DOMAIN}/gpus"
# Why each pod the manager waits on is not Ready yet (JSON: pod name -> reason).
ANNOTATION_WAITING = f"{DOMAIN}/waiting"

HOSTNAME_LABEL = "kubernetes.io/hostname"
SSH_CLIENT_DIR = "/root/.ssh"
SSH_SERVER_DIR = "/etc/distributetrain/ssh"
LOCK_LEASE_NAME = "distributetrain-placement"
# The manager's Events name it as their reporting controller (a qualified name).
EVENTS_CONTROLLER = f"{DOMAIN}/manager"

# Longest job name whose derived names ("<job>-worker-<index>") stay valid label values.
MAX_JOB_NAME_LENGTH = 50


def worker_name(job: str, index: int) -> str:
    return f"{job}-worker-{index}"


def chief_name(job: str) -> str:
    return f"{job}-chief"


def secret_name(job: str) -> str:
    return f"{job}-ssh"


def job_selector(job: str) -> str:
    return f"{LABEL_JOB}={job}"


def job_labels(job: str, role: str) -> dict[str, str]:
    return {LABEL_APP: APP, LABEL_MANAGED_BY: APP, LABEL_JOB: job, LABEL_ROLE: role}
