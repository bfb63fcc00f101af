"""The project's exception types. API errors are translated once, in ``kube``, into
``ApiError`` and its subclasses, so ``except ApiError`` catches every one of them."""

from __future__ import annotations

import re

# Admission's refusals share RBAC's 403 but not its fix. As the apiserver words them:
# ResourceQuota "exceeded quota: NAME, requested: ...", "failed quota: NAME: must specify
# ...", "status unknown for quota: NAME"; LimitRange "maximum memory usage per Container
# is 1Gi, but limit is 2Gi", "minimum cpu usage per Pod is ...", "cpu max limit to
# request ratio per Container is ...".
QUOTA_OR_LIMIT_REFUSAL = re.compile(
    r"\b(exceeded quota|failed quota|status unknown for quota): "
    r"|\b(minimum|maximum) \S+ usage per (Container|Pod|PersistentVolumeClaim) is "
    r"|\bmax limit to request ratio per (Container|Pod) is ",
    re.IGNORECASE,
)
# Of those, the one that may pass later: the quota is full now, with what others use.
QUOTA_FULL = re.compile(r"\bexceeded quota: ([a-z0-9.-]+)", re.IGNORECASE)
# The other refusals of admission, which RBAC's fix does not cure either. A webhook's or a
# ValidatingAdmissionPolicy's, as the apiserver words them ("admission webhook "NAME"
# denied the request: ...", "ValidatingAdmissionPolicy 'P' with binding 'B' denied request:
# ..."), whatever code they chose (403; 422 by default for a policy; a webhook's own):
POLICY_OR_WEBHOOK_REFUSAL = re.compile(
    r"\badmission webhook \"[^\"]*\" denied the request"
    r"|\bValidatingAdmissionPolicy '[^']*' with binding '[^']*' denied request"
)
# and any built-in plugin's 403, "KIND "NAME" is forbidden: WHY" (PodSecurity's "violates
# PodSecurity ...", a terminating namespace, a missing ServiceAccount...). RBAC's own is
# the one "is forbidden" whose WHY is 'User "NAME" cannot VERB ...' (the apiserver's
# forbiddenMessage); a 403 without a message is taken for RBAC's too.
BUILT_IN_ADMISSION_REFUSAL = re.compile(r'\bis forbidden: (?!User ")')
# An admission plugin of a restarted API server whose caches have not synced yet (the
# policy and webhook plugins wait 10 s for them, then answer this 403): try again.
ADMISSION_NOT_READY = "is forbidden: not yet ready to handle request"


class DistributeTrainError(Exception):
    """Base class of the project's errors. Which exit code reports each one is the
    manager's to say (``manager/reporting/errorcodes``), in one place."""


class UsageError(DistributeTrainError):
    """Bad input, detected before anything is created. Names the flag and the valid form."""

    def __init__(self, flag: str, message: str):
        self.flag = flag
        super().__init__(f"{flag}: {message}")


class ApiError(DistributeTrainError):
    """The Kubernetes API refused or failed a call: the base of every API error, and the
    error of a status no subclass names (translated once, in ``kube.calls``)."""


class NotFound(ApiError):
    pass


class AlreadyExists(ApiError):
    pass


class Conflict(ApiError):
    pass


class Gone(ApiError):
    """A watch's resourceVersion is too old (HTTP 410): relist and watch again."""


class Invalid(ApiError):
    """The API server rejected an object (HTTP 422)."""


class Forbidden(ApiError):
    """RBAC refused a call (HTTP 403 without an admission plugin's wording)."""


class QuotaExceeded(ApiError):
    """A ResourceQuota or LimitRange of the namespace refused an object (a 403 from admission, not RBAC)."""

    def __init__(self, message: str):
        super().__init__(
            f"a ResourceQuota or LimitRange of the namespace refuses it: {message} (a job pod asks for "
            f"--cpu-per-gpu and --memory-per-gpu times its GPUs, limited to --cpu-limit-per-gpu and "
            f"--memory-limit-per-gpu times them: lower them or --num-gpus, or ask for more quota)"
        )


class QuotaFull(QuotaExceeded):
    """A ResourceQuota refused an object for what the namespace uses now ("exceeded quota:
    NAME"): a refusal that may pass once others release their share (``--wait-for-gpus``
    waits for it). ``message`` is the API server's, with the used figures at the refusal."""

    def __init__(self, quota: str, message: str):
        self.quota = quota
        self.message = message
        super().__init__(message)


class AdmissionRefused(ApiError):
    """The cluster's admission control refused an object: PodSecurity, an admission policy,
    a webhook (a 403, or whatever 4xx a policy or webhook chose). Not RBAC: no rule of
    rbac/ cures it."""

    def __init__(self, message: str):
        super().__init__(
            f"the cluster's admission control refuses it: {message} (not a missing RBAC permission: a PodSecurity "
            f"level, an admission policy or a webhook of the cluster; its administrators say what it allows)"
        )


class TransientApiError(ApiError):
    """Connection refused, timeouts, 429 and 5xx: worth retrying until a deadline."""


def forbidden(message: str) -> ApiError:
    """An HTTP 403 but a policy's or webhook's: a quota or limit refusal, admission not
    ready yet (transient), another built-in plugin's refusal, else RBAC's."""
    if full := QUOTA_FULL.search(message):
        return QuotaFull(full.group(1), message)
    if QUOTA_OR_LIMIT_REFUSAL.search(message):
        return QuotaExceeded(message)
    if ADMISSION_NOT_READY in message:
        return TransientApiError(message)
    return AdmissionRefused(message) if BUILT_IN_ADMISSION_REFUSAL.search(message) else Forbidden(message)


class NotOwned(DistributeTrainError):
    """An object with the job's name exists but belongs to someone else."""


class LeaseBusy(DistributeTrainError):
    """A Lease (``kube.lock``) stayed held by another manager for as long as this one could wait."""


class LeaseLost(DistributeTrainError):
    """A Lease this manager held may have been held by another manager meanwhile."""


class JobNotFound(DistributeTrainError):
    """No such job, or not that part of it (yet): the user's mistake or timing, not the API's."""


class JobFailed(DistributeTrainError):
    """The job cannot go on; ``exit_code``, chosen where it fails, says why (69, 71, 75...)."""

    def __init__(self, message: str, exit_code: int):
        self.exit_code = exit_code
        super().__init__(message)


class AttemptLost(JobFailed):
    """A pod of the attempt was lost for a reason outside the training script (deleted,
    evicted, its node gone, its sshd dead): the case --max-restarts retries."""

    def __init__(self, cause: str, exit_code: int):
        self.cause = cause  # e.g. "pod demo-worker-0 was deleted"
        super().__init__(f"{cause}; aborted the job", exit_code)


class Cancelled(BaseException):
    """SIGTERM or SIGINT: tear down and stop.

    Raised by the signal's handler wherever the main thread is, often inside an API call
    whose failure the code around it tolerates (a best-effort annotation, a retried
    replacement): like KeyboardInterrupt, it is no error of the job, so no ``except
    Exception`` or ``except DistributeTrainError`` takes it for one and goes on. A
    manager whose only SIGTERM was swallowed so trained on and was killed at the end of
    its grace period, the job left to the garbage collector."""
