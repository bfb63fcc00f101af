"""Who the job's pods and the manager run as, and what they may do: PodSecurity `restricted`
everywhere, under a user the job fixes or the platform assigns.

Job pods run as ``names.JOB_USER_UID`` (1000) with that group and fsGroup, unless
``--run-as-user`` says otherwise: another UID (files on an existing volume belong to
whoever wrote them: NFS, EFS, a claim an earlier job wrote), or ``platform``: none at all,
for the platform to assign. The default, ``auto``, is 1000 except in a namespace whose
annotations say the platform assigns UIDs there (OpenShift's ``restricted-v2`` refuses any
UID outside the namespace's range, and fills in the first of it and an fsGroup for a pod
that names none). The manager resolves ``auto`` against its job's namespace
(``for_namespace``) before it builds any pod. Whatever the UID, the image needs no
/etc/passwd entry for it: the pod scripts give it one (podscripts/job-user.sh).
"""

from __future__ import annotations

from collections.abc import Mapping

from distributetrain.core import errors, names
from distributetrain.core.settings import RUN_AS_AUTO, RUN_AS_PLATFORM, JobSettings

# On every OpenShift project: the UIDs its pods may run as, "1000680000/10000" (the first
# and how many). The restricted-v2 SCC (MustRunAsRange) looks it up for a pod that names
# no UID and assigns the first ("About pre-allocated security context constraints values",
# OpenShift Container Platform docs, Authentication and authorization); its fsGroup comes
# from openshift.io/sa.scc.supplemental-groups the same way.
OPENSHIFT_UID_RANGE_ANNOTATION = "openshift.io/sa.scc.uid-range"
# OpenShift's words when no SCC admits a pod (a 403: "pods "x" is forbidden: unable to ...").
OPENSHIFT_SCC_REFUSAL = "unable to validate against any security context constraint"
MAX_ID = 2**31 - 1  # Kubernetes' bound of runAsUser, runAsGroup and fsGroup


def _id(text: str) -> int | None:
    """A decimal ID, or None."""
    digits = text.strip()
    return int(digits) if digits.isascii() and digits.isdigit() else None


def run_as_user(text: str) -> int | str:
    """``--run-as-user``: a UID of 1 or more (never root), ``auto`` or ``platform``."""
    if text in (RUN_AS_AUTO, RUN_AS_PLATFORM):
        return text
    uid = _id(text)
    if uid is None or not 1 <= uid <= MAX_ID:
        raise ValueError(f"must be a UID from 1 to {MAX_ID} (never 0: job pods never run as root), "
                         f"{RUN_AS_AUTO} or {RUN_AS_PLATFORM}, got {text!r}")
    return uid


def group_id(text: str) -> int:
    """``--run-as-group``: a GID, 0 (OpenShift's group of arbitrary users) included."""
    gid = _id(text)
    if gid is None or gid > MAX_ID:
        raise ValueError(f"must be a GID from 0 to {MAX_ID}, got {text!r}")
    return gid


def for_namespace(settings: JobSettings, namespace: Mapping | None) -> JobSettings:
    """``settings`` with ``auto`` decided for the job's namespace (its metadata; None if it
    does not exist): left to the platform where the namespace says the platform assigns
    UIDs, else 1000 (``job_ids``)."""
    annotations = (namespace or {}).get("annotations") or {}
    if settings.run_as_user == RUN_AS_AUTO and OPENSHIFT_UID_RANGE_ANNOTATION in annotations:
        return settings.replace(run_as_user=RUN_AS_PLATFORM)
    return settings


def platform_refusal(settings: JobSettings, kind: str, message: str) -> errors.UsageError | None:
    """A job pod the platform's security constraints refuse (OpenShift's SCCs): bad input
    naming the flag that chose what they refuse, not the cluster's admission at large."""
    if OPENSHIFT_SCC_REFUSAL not in message:
        return None
    refused = f"the namespace's security context constraints refuse the job's {kind}"
    if settings.host_network:
        return errors.UsageError("--host-network", f"{refused}: {message}")
    if settings.run_as_group is not None and "fsGroup" in message:
        return errors.UsageError("--run-as-group", f"{refused} (leave the group to them: no --run-as-group): {message}")
    return errors.UsageError("--run-as-user",
                             f"{refused} (leave the UID to them: --run-as-user {RUN_AS_AUTO}): {message}")


def job_ids(settings: JobSettings) -> tuple[int | None, int | None]:
    """The job pods' UID and GID; None where the platform assigns it."""
    user = {RUN_AS_AUTO: names.JOB_USER_UID, RUN_AS_PLATFORM: None}.get(settings.run_as_user, settings.run_as_user)
    return user, user if settings.run_as_group is None else settings.run_as_group


def pod_security_context(user: int | None = None, group: int | None = None) -> dict:
    """PodSecurity `restricted` for a pod of ``user`` and ``group`` (each None: the
    platform's, else the image's USER), with each container's half
    (``container_security_context``).

    The UID by number, so the kubelet can check that the user is not root whatever the
    image's USER says; fsGroup makes the SSH files (and volumes) the group's. Where the
    platform assigns the UID, runAsNonRoot still holds it to a non-root one.
    """
    ids = {"runAsUser": user} if user is not None else {}
    if group is not None:
        ids |= {"runAsGroup": group, "fsGroup": group}
    return {"runAsNonRoot": True, **ids, "seccompProfile": {"type": "RuntimeDefault"}}


def job_pod_security_context(settings: JobSettings) -> dict:
    return pod_security_context(*job_ids(settings))


def container_security_context(read_only_root: bool = False) -> dict:
    """No privileges at all; ``read_only_root`` for the manager (it writes nothing) and job
    pods with --read-only-root-filesystem. Job pods keep theirs writable by default:
    training scripts write where their image lets them (./outputs, a directory chowned to
    the job's user); everything the pod scripts write is on volumes, so a policy that
    forces a read-only root filesystem breaks nothing of theirs."""
    context = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    return context | ({"readOnlyRootFilesystem": True} if read_only_root else {})
