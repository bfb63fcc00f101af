"""How a phase ends, whichever it is and however it went: the job's one way out.

``lifecycle`` turns what a phase did (its exit code, or the error it raised) into an
``Ending``; ``end`` carries it out: the job's teardown (unless the manager's container
restarts and adopts the job), then its outcome on the manager pod.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass

from distributetrain.core import errors
from distributetrain.core.settings import JobSettings
from distributetrain.kube.api import KubeApi
from distributetrain.manager.reporting.errorcodes import exit_code_of
from distributetrain.manager.reporting.reporting import Reporter
from distributetrain.manager.watching.teardown import tear_down

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ending:
    """How a phase ended: the manager's exit code, what is left to tear down, and the
    outcome recorded on the manager pod (none: nothing to record)."""

    exit_code: int
    tear_down: bool = False
    keep_chief: bool = False  # a finished chief, for its logs (--delete-chief)
    outcome: tuple[int, str] | None = None  # (exit code, reason)
    unless_recorded: bool = False  # the outcome only where none is recorded yet
    failed: bool = False  # a teardown that fails too only logs: it never hides the first failure
    unless_restarting: bool = False  # nothing to do if the manager's container restarts: it adopts the job
    error_line: str = ""  # logged once the job is torn down
    trace: BaseException | None = None  # an unexpected error, logged with its traceback


def failure(error: BaseException, reason: str, error_line: str, tear_down: bool = True,
             trace: BaseException | None = None) -> Ending:
    """The ending of a phase that raised ``error``: torn down, the error's exit code recorded."""
    code = exit_code_of(error)
    return Ending(code, tear_down=tear_down, outcome=(code, reason), failed=True, error_line=error_line, trace=trace)


def abnormal_end(exit_code: int) -> str:
    """What a phase's exit code says, for one that could not say it itself."""
    if exit_code > 128:
        try:
            return f"the manager was stopped by {signal.Signals(exit_code - 128).name}; the job was torn down"
        except ValueError:
            pass
    return f"the manager failed with exit code {exit_code}; the job was torn down"


def end(kube: KubeApi, settings: JobSettings, ending: Ending, reporter: Reporter) -> int:
    """The job's one way out, whichever the phase and its ending: its teardown, then its
    outcome. A teardown that fails after the job ended well is the job's outcome."""
    if ending.unless_restarting and will_restart(kube, settings):
        log.info("job %s: the manager container restarts and adopts the job; not tearing down", settings.job_name)
        return ending.exit_code
    if ending.tear_down:
        try:
            deleted = tear_down(kube, settings, ending.keep_chief)
            log.info("job %s torn down: %s", settings.job_name, ", ".join(deleted) or "nothing left")
        except errors.DistributeTrainError as e:
            log.error("teardown of job %s incomplete: %s", settings.job_name, e)
            if not ending.failed:
                ending = failure(e, str(e), f"job {settings.job_name} failed: {e}", tear_down=False)
    if ending.error_line:
        log.error("%s", ending.error_line, exc_info=ending.trace)
    if ending.outcome is not None and not (ending.unless_recorded and reporter.record().finished):
        reporter.finished(*ending.outcome)
    return ending.exit_code


def will_restart(kube: KubeApi, settings: JobSettings) -> bool:
    """Whether the kubelet restarts the manager's container after it fails.

    A pod being deleted restarts nothing, whatever its restartPolicy.
    """
    pod = kube.read("Pod", settings.own_namespace, settings.job_name) if settings.owner_uid else None
    if not pod or pod["metadata"].get("deletionTimestamp"):
        return False
    return (pod.get("spec") or {}).get("restartPolicy", "Never") != "Never"
