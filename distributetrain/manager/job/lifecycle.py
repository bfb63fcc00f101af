"""Run the manager's phases with one guarantee: every way out tears the job down.

SIGTERM and SIGINT become ``errors.Cancelled`` in the main thread (interrupting a
blocked watch), failures become exit codes from ``exitcodes``, and the outcome is
recorded on the manager pod (annotations, an Event). Teardown ignores further signals
so it always finishes, and so does sending the Events still queued (bounded).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from distributetrain.core import errors, exitcodes
from distributetrain.core.pods import podsecurity
from distributetrain.core.clock import Clock
from distributetrain.core.settings import JobSettings
from distributetrain.kube.api import KubeApi
from distributetrain.kube.client import Kube
from distributetrain.kube.events import EventRecorder
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.pods import runtimeclass
from distributetrain.manager.reporting.errorcodes import exit_code_of
from distributetrain.manager.job.job import Job
from distributetrain.manager.reporting.reporting import Reporter
from distributetrain.manager.watching.teardown import tear_down

log = logging.getLogger(__name__)

FOLLOWED_PHASES = ("post-training", "run")  # each follows the job to its end, and tears it down
JOB_PHASES = ("pre-training", *FOLLOWED_PHASES)


@contextmanager
def cancellable() -> Iterator[None]:
    """SIGTERM/SIGINT raise Cancelled once; later signals are ignored (teardown is running)."""
    fired = False

    def handler(signum, _frame):
        nonlocal fired
        if fired:
            return
        fired = True
        raise errors.Cancelled(f"received {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def shielded() -> Iterator[None]:
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def will_restart(kube: KubeApi, settings: JobSettings) -> bool:
    """Whether the kubelet restarts the manager's container after it fails.

    A pod being deleted restarts nothing, whatever its restartPolicy.
    """
    pod = kube.get_pod(settings.own_namespace, settings.job_name) if settings.owner_uid else None
    if not pod or pod["metadata"].get("deletionTimestamp"):
        return False
    return (pod.get("spec") or {}).get("restartPolicy", "Never") != "Never"


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


def execute(
    kube: Kube, settings: JobSettings, phase: str, clock: Clock, unless_restarting: bool = False,
    failed_with: int | None = None,
) -> int:
    """Run ``phase`` (pre-training, post-training, run or teardown) and return the manager's exit code.
    Every window and deadline of the job is of ``clock``.

    Teardown only: ``unless_restarting`` leaves the job alone when the manager's
    container will be restarted, since the new container adopts it; ``failed_with`` is
    the exit code of the phase that ended without recording an outcome (killed, crashed),
    recorded on the manager pod unless one is there already.
    """
    reporter = Reporter(kube, settings, EventRecorder.for_manager(kube, settings, clock, jobevents.KINDS))
    try:
        ending = _ending(kube, settings, phase, unless_restarting, failed_with, reporter, clock)
        with shielded():
            return _end(kube, settings, ending, reporter)
    finally:
        with shielded():
            reporter.events.close()


def abnormal_end(exit_code: int) -> str:
    """What a phase's exit code says, for one that could not say it itself."""
    if exit_code > 128:
        try:
            return f"the manager was stopped by {signal.Signals(exit_code - 128).name}; the job was torn down"
        except ValueError:
            pass
    return f"the manager failed with exit code {exit_code}; the job was torn down"


def _ending(
    kube: Kube, settings: JobSettings, phase: str, unless_restarting: bool, failed_with: int | None,
    reporter: Reporter, clock: Clock,
) -> Ending:
    """Run the phase; every failure is an ending that tears the job down (``_end``)."""
    try:
        with cancellable():
            if phase in JOB_PHASES:
                return _drive(kube, settings, phase, reporter, clock)
            outcome = None if failed_with is None else (failed_with, abnormal_end(failed_with))
            return Ending(exitcodes.OK, tear_down=True, keep_chief=not settings.delete_chief, outcome=outcome,
                          unless_recorded=True, failed=True, unless_restarting=unless_restarting)
    except errors.UsageError as e:
        # Raised before anything is created (pre-flight and request checks); a followed
        # phase may still hold what pre-training or an earlier attempt created.
        return _failed(e, str(e), str(e), tear_down=phase in FOLLOWED_PHASES)
    except errors.DistributeTrainError as e:
        return _failed(e, str(e), f"job {settings.job_name} failed: {e}")
    except Exception as e:
        return _failed(e, f"internal error: {e}", f"job {settings.job_name}: unexpected error", trace=e)


def _failed(error: BaseException, reason: str, error_line: str, tear_down: bool = True,
            trace: BaseException | None = None) -> Ending:
    code = exit_code_of(error)
    return Ending(code, tear_down=tear_down, outcome=(code, reason), failed=True, error_line=error_line, trace=trace)


def _drive(kube: Kube, settings: JobSettings, phase: str, reporter: Reporter, clock: Clock) -> Ending:
    """Pre-training ends once the attempt has started (post-training follows it on); a
    followed phase drives the job to its end, then tears it down, keeping a finished
    chief for its logs unless --delete-chief."""
    record = reporter.record()  # as this process finds the job: its attempt, its start
    reporter.spec()
    # Who the pods run as, decided for the namespace (the record keeps what was asked).
    settings = podsecurity.for_namespace(settings, kube.namespace_metadata(settings.namespace))
    # Post-training follows pods that exist: a RuntimeClass gone meanwhile is no bad input.
    settings = runtimeclass.with_runtime_class(kube, settings, strict=phase != "post-training")
    job = Job(kube, settings, reporter, record, clock)
    followed = phase in FOLLOWED_PHASES
    code = job.drive(until_started=not followed)
    if not followed:
        return Ending(code)
    return Ending(code, tear_down=True, keep_chief=not settings.delete_chief,
                  outcome=(code, "training finished" if code == 0 else f"chief exited with code {code}"))


def _end(kube: KubeApi, settings: JobSettings, ending: Ending, reporter: Reporter) -> int:
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
                ending = _failed(e, str(e), f"job {settings.job_name} failed: {e}", tear_down=False)
    if ending.error_line:
        log.error("%s", ending.error_line, exc_info=ending.trace)
    if ending.outcome is not None and not (ending.unless_recorded and reporter.record().finished):
        reporter.finished(*ending.outcome)
    return ending.exit_code
