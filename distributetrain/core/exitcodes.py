"""The manager's exit codes: what happened, readable from the pod's status.

A finished chief's exit code is passed through unchanged (0 on success). The manager's
own outcomes use the sysexits range so they do not read as a training script's
``exit(1)``; the termination message and the pod's annotations name the cause either way.
"""

OK = 0
NOT_FOUND = 1  # the command line's: no such job (or not that part of it yet), like kubectl's "not found"
USAGE = 2  # bad input: nothing was created
INSUFFICIENT_GPUS = 69  # EX_UNAVAILABLE: the cluster cannot supply the GPUs (within --wait-for-gpus)
INTERNAL_ERROR = 70  # EX_SOFTWARE: a bug; everything created was still deleted
WORKER_LOST = 71  # a worker failed, was deleted or vanished mid-job
PREEMPTED = 72  # Kueue evicted the job's workload (a higher priority, or quota reclaimed): --queue only
QUOTA_EXCEEDED = 73  # EX_CANTCREAT: a ResourceQuota or LimitRange of the namespace refused the job's pods
TIMED_OUT = 75  # EX_TEMPFAIL: workers not ready in time, or --active-deadline passed
API_ERROR = 76  # EX_PROTOCOL: the Kubernetes API kept failing
PERMISSION_DENIED = 77  # EX_NOPERM: RBAC refused a call; the message names the permission
ADMISSION_REFUSED = 78  # EX_CONFIG: the cluster's admission control (PodSecurity, a policy, a webhook) refused it
# From a job pod's script: the image cannot run as the job's non-root user (no
# such user, sshd missing or refusing to run); the chief's passes through as the job's.
IMAGE_UNFIT = 79
CANCELLED = 143  # 128 + SIGTERM: the manager was asked to stop
