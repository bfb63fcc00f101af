"""Every name and label the job uses, in one place (never string literals in logic)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DOMAIN = "distributetrain.io"
LABEL_APP = "app.kubernetes.io/name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB = f"{DOMAIN}/job"
LABEL_ROLE = f"{DOMAIN}/role"
LABEL_WORKER_INDEX = f"{DOMAIN}/worker-index"
# The manager pod's UID on every object of its job. The job label alone names a job, not
# one run of it: a manager re-applied under the same name, or an earlier job's objects
# left in another namespace (--namespace: no owner reference, no garbage collection),
# carry the same job label, and must never be adopted, followed or counted as this job's.
LABEL_OWNER_UID = f"{DOMAIN}/owner-uid"
# On the manager pod, its own UID, set by the manager itself: what its NetworkPolicy selects
# it by (its name is no label, and the job label of a Job's pod is the Job's name).
LABEL_MANAGER_UID = f"{DOMAIN}/manager-uid"
APP = "distributetrain"

ROLE_WORKER = "worker"
ROLE_CHIEF = "chief"
ROLE_MANAGER = "manager"
# The pods that book GPUs for a job: every manager's workers and chiefs, listed afresh
# under the placement Lease (``manager.placement.booking``).
BOOKING_ROLES = (ROLE_WORKER, ROLE_CHIEF)
BOOKINGS_SELECTOR = f"{LABEL_ROLE} in ({','.join(BOOKING_ROLES)})"
# A job's ResourceClaimTemplates (its pods' GPUs on DRA nodes), and the ResourceClaims made
# from them, which carry the template's labels: an inventory counts their devices from the
# job's pods (``core.placement.dracounting``), never from the claims as well.
ROLE_GPUS = "gpus"
# A job's PodGroup (``core.pods.gang``): its attempt's pods as one gang for the scheduler.
ROLE_GANG = "gang"
# On a job pod whose GPUs come through a ResourceClaim (a DRA node): how many devices it
# claims, so an inventory counts them from the pod, as it counts extended-resource requests.
LABEL_DRA_GPUS = f"{DOMAIN}/dra-gpus"

# Annotations the manager keeps on its own pod: what `distributetrain status` reads.
ANNOTATION_PHASE = f"{DOMAIN}/phase"
ANNOTATION_PLAN = f"{DOMAIN}/plan"
ANNOTATION_EXIT_CODE = f"{DOMAIN}/exit-code"
ANNOTATION_REASON = f"{DOMAIN}/reason"
ANNOTATION_GPUS = f"{DOMAIN}/gpus"
# Which start of the job's pods is current: every re-plan creates them under new names.
ANNOTATION_ATTEMPT = f"{DOMAIN}/attempt"
# Restarts used of --max-restarts, and why the last one happened: on the pod, so a
# restarted manager container neither resets nor double-counts the budget.
ANNOTATION_RESTARTS = f"{DOMAIN}/restarts"
ANNOTATION_RESTART_REASON = f"{DOMAIN}/last-restart-reason"
# Why each pod the manager waits on is not Ready yet (JSON: pod name -> reason).
ANNOTATION_WAITING = f"{DOMAIN}/waiting"
# When the manager last held the placement Lease to book GPUs: a write to its own pod in
# the critical section, whose resourceVersion the bookings are read at (``manager.placement.booking``).
ANNOTATION_BOOKED_AT = f"{DOMAIN}/booked-at"
# On a manager waiting for the placement Lease (``manager.placement.turns``): when it began
# waiting (its place in the queue, a sortable UTC time), and who it is as the Lease names holders.
LABEL_PLACEMENT_WAITING = f"{DOMAIN}/placement-waiting-since"
ANNOTATION_PLACEMENT_HOLDER = f"{DOMAIN}/placement-holder"
# While the job waits in a Kueue queue: its workload's place in the LocalQueue, 1 for the
# next one admitted (from Kueue's visibility API, where the cluster serves it).
ANNOTATION_QUEUE_POSITION = f"{DOMAIN}/queue-position"
# The job's settings as the manager runs them (``core.job.jobspec``'s JSON form), written when
# it starts: ``status`` and ``list`` read them instead of parsing its arguments again.
ANNOTATION_SPEC = f"{DOMAIN}/spec"
# With --topology: the network domains the current attempt's plan got ("block b1; rack r1, r2").
ANNOTATION_DOMAINS = f"{DOMAIN}/domains"
# On a job pod the manager deleted while the job ran (its node lost, never Ready): why,
# read back as the cause of its loss.
ANNOTATION_DELETED_BECAUSE = f"{DOMAIN}/deleted-because"

# On every pod of a running job and on the manager: neither the cluster autoscaler nor
# Karpenter (consolidation, drift, expiry) evicts them to scale down or replace their
# node. A lost pod ends a static job and costs an elastic one a worker; once the pods are
# gone, nothing holds their nodes.
NO_DISRUPTION_ANNOTATIONS = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
                             "karpenter.sh/do-not-disrupt": "true"}

# On a job pod made for a node the cluster adds (``core.placement.scaleup``): unpinned, Pending until
# an autoscaler's node joins. Its wait is the node's boot, not a start gone wrong. A label,
# not an annotation: every booking reads the labels of the bookings under the Lease
# (annotations it never reads), and counts such a pod on the node that joins for it (``inventory``).
LABEL_AWAITS_NEW_NODE = f"{DOMAIN}/awaits-new-node"
# The node of such a pod's share in a plan ("(new node)=8,gpu-a=4"): no Node can have this name.
NEW_NODE = "(new node)"

HOSTNAME_LABEL = "kubernetes.io/hostname"
# The manager's port where the chief asks for its hosts (``manager.pods.discovery``).
DISCOVERY_PORT = 8470
# The chief's SSH files: a fixed path, not ~/.ssh, since the job user's home is the image's
# choice (the ssh wrapper names the config file there with -F).
SSH_CLIENT_DIR = "/etc/distributetrain/ssh-client"
SSH_SERVER_DIR = "/etc/distributetrain/ssh"
# Every job pod runs as this user, never root (PodSecurity `restricted`): the workers'
# sshd too, which then logs in only that same user. base_image/Dockerfile creates it; a
# user's own image needs an /etc/passwd entry with this uid (README, "Images").
JOB_USER_UID = 1000
LOCK_LEASE_NAME = "distributetrain-placement"
# The manager's Events name it as their reporting controller (a qualified name).
EVENTS_CONTROLLER = f"{DOMAIN}/manager"

# Longest job name whose derived names ("<job>-worker-<index>") stay valid label values.
MAX_JOB_NAME_LENGTH = 50


def _attempt_suffix(attempt: int) -> str:
    # A re-plan never reuses a released pod's name: the old pod may still be terminating
    # (on a dead node, for ever), and a same-named create would adopt it.
    return f"-r{attempt}" if attempt else ""


def worker_name(job: str, index: int, attempt: int = 0) -> str:
    return f"{job}-worker-{index}{_attempt_suffix(attempt)}"


def chief_name(job: str, attempt: int = 0) -> str:
    return f"{job}-chief{_attempt_suffix(attempt)}"


@dataclass(frozen=True)
class Attempt:
    """One start of a job's pods under one plan; only the job's loop moves to the next."""

    job: str
    number: int = 0

    @property
    def chief(self) -> str:
        return chief_name(self.job, self.number)

    def worker(self, index: int) -> str:
        return worker_name(self.job, index, self.number)

    def workers(self, count: int) -> list[str]:
        return [self.worker(index) for index in range(count)]

    def next(self) -> Attempt:
        return Attempt(self.job, self.number + 1)


def secret_name(job: str) -> str:
    return f"{job}-ssh"


def claim_template_name(job: str, share: int, owner_uid: str = "") -> str:
    """The ResourceClaimTemplate of the job's pods of ``share`` GPUs on DRA nodes; with the
    manager's UID in it, an earlier run's (deleted with its manager) never stands in its way."""
    return f"{job}-gpus-{share}" + (f"-{owner_uid[:8]}" if owner_uid else "")


def gang_name(job: str, attempt: int = 0, owner_uid: str = "") -> str:
    """The PodGroup of the attempt's pods (``core.pods.gang``): a new one per attempt, since a
    lost attempt's may stay until its pods are gone (the PodGroupProtection finalizer);
    with the manager's UID, an earlier run's never stands in its way."""
    return f"{job}-gang{_attempt_suffix(attempt)}" + (f"-{owner_uid[:8]}" if owner_uid else "")


def pods_policy_name(job: str) -> str:
    return f"{job}-pods"


def manager_policy_name(job: str) -> str:
    return f"{job}-manager"


def job_selector(job: str, owner_uid: str = "") -> str:
    """The job's objects; with ``owner_uid``, only those of that manager's run of it."""
    return f"{LABEL_JOB}={job}" + (f",{LABEL_OWNER_UID}={owner_uid}" if owner_uid else "")


def job_labels(job: str, role: str, owner_uid: str = "") -> dict[str, str]:
    labels = {LABEL_APP: APP, LABEL_MANAGED_BY: APP, LABEL_JOB: job, LABEL_ROLE: role}
    if owner_uid:
        labels[LABEL_OWNER_UID] = owner_uid
    return labels


def owner_uid_of(obj: dict) -> str:
    """The UID of the manager that created a job object ("" if none is recorded)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_OWNER_UID, "")


def owner_uids(obj: dict) -> set[str]:
    """Who owns ``obj``: its owner references, and the manager UID label (the only record
    of the owner in another namespace, where owner references cannot point)."""
    owners = {ref.get("uid") for ref in obj["metadata"].get("ownerReferences") or ()}
    return owners | ({uid} if (uid := owner_uid_of(obj)) else set())


def is_booking(labels: Mapping[str, str]) -> bool:
    """A pod of some job's attempt (``BOOKINGS_SELECTOR`` selects exactly these)."""
    return labels.get(LABEL_ROLE) in BOOKING_ROLES


def is_job_claim(labels: Mapping[str, str]) -> bool:
    """A ResourceClaim made from a job's template (``ROLE_GPUS``): its pod accounts for it."""
    return labels.get(LABEL_ROLE) == ROLE_GPUS and labels.get(LABEL_MANAGED_BY) == APP
