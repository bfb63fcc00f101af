"""Every error the project raises, and the exit code that reports it: one table, whole."""

from distributetrain.core import errors, exitcodes
from distributetrain.manager.reporting.errorcodes import exit_code_of
from distributetrain.manager.placement.scaleup import NodesNotComing
from distributetrain.manager.job.pretraining import AttemptNotStarted

API_ERRORS = [
    errors.ApiError("HTTP 400 Bad Request"),
    errors.NotFound('pods "demo-chief" not found'),
    errors.AlreadyExists('pods "demo-chief" already exists'),
    errors.Conflict("the object has been modified"),
    errors.Gone("too old resource version: 1 (5)"),
    errors.Invalid('Pod "demo-chief" is invalid'),
    errors.Forbidden('pods is forbidden: User "u" cannot create resource "pods"'),
    errors.QuotaExceeded("failed quota: compute: must specify limits.cpu"),
    errors.QuotaFull("gpus", "exceeded quota: gpus, requested: requests.nvidia.com/gpu=2"),
    errors.AdmissionRefused('pods "w" is forbidden: violates PodSecurity "restricted:latest"'),
    errors.TransientApiError("cannot reach the Kubernetes API: connection refused"),
]


def test_every_api_error_is_an_api_error():
    caught = []
    for error in API_ERRORS:
        try:
            raise error
        except errors.ApiError as e:
            caught.append(type(e))
    assert caught == [type(error) for error in API_ERRORS]


def test_no_api_error_carries_an_exit_code():
    assert [type(error) for error in API_ERRORS if hasattr(error, "exit_code")] == []


def test_each_error_has_the_exit_code_a_user_reads():
    others = [
        errors.UsageError("--num-gpus", "must be at least 1"),
        errors.NotOwned("Secret demo-ssh exists and belongs to another job"),
        errors.LeaseBusy("could not take the placement lock Lease within 120s"),
        errors.LeaseLost("the placement lock Lease may have been held by another manager meanwhile"),
        errors.JobNotFound("no job 'demo' in namespace 'ml'"),
        errors.Cancelled("received SIGTERM"),
        errors.JobFailed("not enough free GPUs", exitcodes.INSUFFICIENT_GPUS),
        errors.JobFailed("job exceeded --active-deadline 60s", exitcodes.TIMED_OUT),
        errors.AttemptLost("pod demo-worker-0 was deleted", exitcodes.WORKER_LOST),
        errors.AttemptLost("pod demo-worker-0 was evicted by Kueue", exitcodes.PREEMPTED),
        AttemptNotStarted({"demo-worker-0": "ContainerCreating"}),
        NodesNotComing("all available instance types exceed limits for nodepool"),
        errors.DistributeTrainError("a bug"),
        ValueError("a bug"),
    ]
    assert [(type(error).__name__, exit_code_of(error)) for error in API_ERRORS + others] == [
        ("ApiError", 76),
        ("NotFound", 76),
        ("AlreadyExists", 76),
        ("Conflict", 76),
        ("Gone", 76),
        ("Invalid", 2),
        ("Forbidden", 77),
        ("QuotaExceeded", 73),
        ("QuotaFull", 73),
        ("AdmissionRefused", 78),
        ("TransientApiError", 76),
        ("UsageError", 2),
        ("NotOwned", 76),
        ("LeaseBusy", 75),
        ("LeaseLost", 76),
        ("JobNotFound", 1),
        ("Cancelled", 143),
        ("JobFailed", 69),
        ("JobFailed", 75),
        ("AttemptLost", 71),
        ("AttemptLost", 72),
        ("AttemptNotStarted", 70),
        ("NodesNotComing", 70),
        ("DistributeTrainError", 70),
        ("ValueError", 70),
    ]
