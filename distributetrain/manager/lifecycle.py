"""Run the manager's phases with one guarantee: every way out tears the job down.

SIGTERM and SIGINT become ``errors.Cancelled`` in the main thread (interrupting a
blocked watch), failures become exit codes from ``exitcodes``, and the outcome is
recorded on the manager pod (annotations, an Event). Teardown ignores further signals
so it always finishes, and so does sending the Events still queued (bounded).
"""

from __future__ import annotations

import logging
import math
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

from distributetrain.core import errors, exitcodes, podsecurity
from distributetrain.core.clock import Clock
from distributetrain.core.settings import JobSettings
from distributetrain.kube.client import Kube
from distributetrain.kube.events import EventRecorder
from distributetrain.manager import jobevents, runtimeclass
from distributetrain.manager.errorcodes import exit_code_of
from distributetrain.manager.job import Job
from distributetrain.manager.reporting import Reporter
from distributetrain.manager.teardown import tear_down

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


def job_deadline(kube: Kube, settings: JobSettings, clock: Clock) -> float:
    """--active-deadline as a time of ``clock``, counted from the manager pod's start (wall
    clock times: the pod's, and now, the one moment both clocks are read).

    Counting from the pod (not this process) keeps the deadline when manager.sh moves
    from pre- to post-training, or when a restarted container adopts the job.
    """
    if not settings.active_deadline_s:
        return math.inf
    pod = kube.get_pod(settings.own_namespace, settings.job_name) if settings.owner_uid else None
    start_text = ((pod or {}).get("status") or {}).get("startTime")
    now = clock.now()
    started = now
    if start_text:
        started = datetime.strptime(start_text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    return clock.monotonic() + (started + settings.active_deadline_s - now)


def will_restart(kube: Kube, settings: JobSettings) -> bool:
    """Whether the kubelet restarts the manager's container after it fails.

    A pod being deleted restarts nothing, whatever its restartPolicy.
    """
    pod = kube.get_pod(settings.own_namespace, settings.job_name) if settings.owner_uid else None
    if not pod or pod["metadata"].get("deletionTimestamp"):
        return False
    return (pod.get("spec") or {}).get("restartPolicy", "Never") != "Never"


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
        return _execute(kube, settings, phase, unless_restarting, failed_with, reporter, clock)
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


def _execute(
    kube: Kube, settings: JobSettings, phase: str, unless_restarting: bool, failed_with: int | None,
    reporter: Reporter, clock: Clock,
) -> int:
    try:
        with cancellable():
            if phase in JOB_PHASES:
                return _drive(kube, settings, phase, reporter, clock)
            if phase == "teardown":
                if unless_restarting and will_restart(kube, settings):
                    log.info("job %s: the manager container restarts and adopts the job; not tearing down",
                             settings.job_name)
                    return exitcodes.OK
                with shielded():
                    _tear_down_quietly(kube, settings, keep_chief=not settings.delete_chief)
                    if failed_with is not None and not reporter.record().finished:
                        reporter.finished(failed_with, abnormal_end(failed_with))
            return exitcodes.OK
    except errors.UsageError as e:
        # Raised before anything is created (pre-flight and request checks); a followed
        # phase may still hold what pre-training or an earlier attempt created.
        if phase in FOLLOWED_PHASES:
            with shielded():
                _tear_down_quietly(kube, settings, keep_chief=False)
        log.error("%s", e)
        reporter.finished(exit_code_of(e), str(e))
        return exit_code_of(e)
    except errors.DistributeTrainError as e:
        with shielded():
            _tear_down_quietly(kube, settings, keep_chief=False)
            log.error("job %s failed: %s", settings.job_name, e)
            reporter.finished(exit_code_of(e), str(e))
        return exit_code_of(e)
    except Exception as e:
        with shielded():
            _tear_down_quietly(kube, settings, keep_chief=False)
            log.exception("job %s: unexpected error", settings.job_name)
            reporter.finished(exit_code_of(e), f"internal error: {e}")
        return exit_code_of(e)


def _drive(kube: Kube, settings: JobSettings, phase: str, reporter: Reporter, clock: Clock) -> int:
    """Pre-training returns once the attempt has started (post-training follows it on); a
    followed phase drives the job to its end and tears it down, keeping a finished chief
    for its logs unless --delete-chief. A failure is torn down by ``_execute``."""
    reporter.spec()
    # Who the pods run as, decided for the namespace (the record keeps what was asked).
    settings = podsecurity.for_namespace(settings, kube.namespace_metadata(settings.namespace))
    # Post-training follows pods that exist: a RuntimeClass gone meanwhile is no bad input.
    settings = runtimeclass.with_runtime_class(kube, settings, strict=phase != "post-training")
    job = Job(kube, settings, reporter, job_deadline(kube, settings, clock), clock)
    if phase not in FOLLOWED_PHASES:
        return job.drive(until_started=True)
    code = job.drive()
    _tear_down(kube, settings, keep_chief=not settings.delete_chief)
    reporter.finished(code, "training finished" if code == 0 else f"chief exited with code {code}")
    return code


def _tear_down(kube: Kube, settings: JobSettings, keep_chief: bool) -> None:
    """The job's one teardown on its way out, whichever way that is (``teardown``)."""
    deleted = tear_down(kube, settings, keep_chief)
    log.info("job %s torn down: %s", settings.job_name, ", ".join(deleted) or "nothing left")


def _tear_down_quietly(kube: Kube, settings: JobSettings, keep_chief: bool) -> None:
    """Teardown on a failure path: never let a second error hide the first."""
    try:
        _tear_down(kube, settings, keep_chief)
    except errors.DistributeTrainError as e:
        log.error("teardown of job %s incomplete: %s", settings.job_name, e)
