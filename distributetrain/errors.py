"""The project's exception types. API errors are translated once, in ``kube``, into these."""

from __future__ import annotations

from distributetrain import exitcodes


class DistributeTrainError(Exception):
    """Base class: carries the exit code that reports it."""

    exit_code = exitcodes.INTERNAL_ERROR


class UsageError(DistributeTrainError):
    """Bad input, detected before anything is created. Names the flag and the valid form."""

    exit_code = exitcodes.USAGE

    def __init__(self, flag: str, message: str):
        self.flag = flag
        super().__init__(f"{flag}: {message}")


class NotFound(DistributeTrainError):
    exit_code = exitcodes.API_ERROR


class AlreadyExists(DistributeTrainError):
    exit_code = exitcodes.API_ERROR


class Conflict(DistributeTrainError):
    exit_code = exitcodes.API_ERROR


class Gone(DistributeTrainError):
    """A watch's resourceVersion is too old (HTTP 410): relist and watch again."""

    exit_code = exitcodes.API_ERROR


class Invalid(DistributeTrainError):
    """The API server rejected an object (HTTP 422)."""

    exit_code = exitcodes.USAGE


class Forbidden(DistributeTrainError):
    exit_code = exitcodes.PERMISSION_DENIED


class TransientApiError(DistributeTrainError):
    """Connection refused, timeouts, 429 and 5xx: worth retrying until a deadline."""

    exit_code = exitcodes.API_ERROR


class ApiError(DistributeTrainError):
    exit_code = exitcodes.API_ERROR


class NotOwned(DistributeTrainError):
    """An object with the job's name exists but belongs to someone else."""

    exit_code = exitcodes.API_ERROR


class JobFailed(DistributeTrainError):
    """The job cannot go on; ``exit_code`` says why."""

    def __init__(self, message: str, exit_code: int):
        self.exit_code = exit_code
        super().__init__(message)


class Cancelled(DistributeTrainError):
    """SIGTERM or SIGINT: tear down and stop."""

    exit_code = exitcodes.CANCELLED
