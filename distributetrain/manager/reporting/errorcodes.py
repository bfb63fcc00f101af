"""Which exit code reports each error: the one place that says it.

Errors say what went wrong; the code a user reads (``core/exitcodes``, docs/exit-codes.md)
is decided here, for the manager's phases and the command line alike. A type's nearest
entry in ``CODES`` wins, so a new subclass of ``ApiError`` exits 76 unless it is named.
``JobFailed`` carries its code: each failure of the job (no GPUs, a timeout, a lost
worker...) chooses it where it is raised.
"""

from __future__ import annotations

from distributetrain.core import errors, exitcodes

CODES: dict[type[BaseException], int] = {
    errors.UsageError: exitcodes.USAGE,
    errors.Invalid: exitcodes.USAGE,  # the API server's word that an object the flags made is bad input
    errors.Forbidden: exitcodes.PERMISSION_DENIED,
    errors.QuotaExceeded: exitcodes.QUOTA_EXCEEDED,
    errors.AdmissionRefused: exitcodes.ADMISSION_REFUSED,
    errors.ApiError: exitcodes.API_ERROR,
    errors.NotOwned: exitcodes.API_ERROR,
    errors.LeaseBusy: exitcodes.TIMED_OUT,
    errors.LeaseLost: exitcodes.API_ERROR,  # the plan may have raced another manager's
    errors.JobNotFound: exitcodes.NOT_FOUND,
    errors.Cancelled: exitcodes.CANCELLED,
    errors.DistributeTrainError: exitcodes.INTERNAL_ERROR,
}


def exit_code_of(error: BaseException) -> int:
    """The exit code that reports ``error``: its own for ``JobFailed``, else its nearest type's in
    ``CODES``; any other exception is a bug (70)."""
    if isinstance(error, errors.JobFailed):
        return error.exit_code
    return next((CODES[kind] for kind in type(error).__mro__ if kind in CODES), exitcodes.INTERNAL_ERROR)
