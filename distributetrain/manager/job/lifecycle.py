"""Run the manager's phases with one guarantee: every way out tears the job down.

SIGTERM and SIGINT become ``errors.Cancelled`` in the main thread (interrupting a
blocked watch), failures become exit codes from ``exitcodes``, and the outcome is
recorded on the manager pod (annotations, an Event). Teardown ignores further signals
so it always finishes, and so does sending the Events still queued (bounded).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

from distributetrain.core import errors, exitcodes
from distributetrain.core.pods import podsecurity
from distributetrain.core.clock import Clock
from distributetrain.core.settings import JobSettings
from distributetrain.kube.client import Kube
from distributetrain.kube.events import EventRecorder
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.pods import runtimeclass
from distributetrain.manager.job import ending
from distributetrain.manager.job.job import Job
from distributetrain.manager.reporting.reporting import Reporter

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
        how = _run_phase(kube, settings, phase, unless_restarting, failed_with, reporter, clock)
        with shielded():
            return ending.end(kube, settings, how, reporter)
    finally:
        with shielded():
            reporter.events.close()


def _run_phase(
    kube: Kube, settings: JobSettings, phase: str, unless_restarting: bool, failed_with: int | None,
    reporter: Reporter, clock: Clock,
) -> ending.Ending:
    """Run the phase; every failure is an ending that tears the job down (``ending.end``)."""
    try:
        with cancellable():
            if phase in JOB_PHASES:
                return _drive(kube, settings, phase, reporter, clock)
            outcome = None if failed_with is None else (failed_with, ending.abnormal_end(failed_with))
            return ending.Ending(exitcodes.OK, tear_down=True, keep_chief=not settings.delete_chief, outcome=outcome,
                                 unless_recorded=True, failed=True, unless_restarting=unless_restarting)
    except errors.Cancelled as e:
        return ending.failure(e, str(e), f"job {settings.job_name} cancelled: {e}")
    except errors.UsageError as e:
        # Raised before anything is created (pre-flight and request checks); a followed
        # phase may still hold what pre-training or an earlier attempt created.
        return ending.failure(e, str(e), str(e), tear_down=phase in FOLLOWED_PHASES)
    except errors.DistributeTrainError as e:
        return ending.failure(e, str(e), f"job {settings.job_name} failed: {e}")
    except Exception as e:
        return ending.failure(e, f"internal error: {e}", f"job {settings.job_name}: unexpected error", trace=e)


def _drive(kube: Kube, settings: JobSettings, phase: str, reporter: Reporter, clock: Clock) -> ending.Ending:
    """Pre-training ends once the attempt has started (post-training follows it on); a
    followed phase drives the job to its end, then tears it down, keeping a finished
    chief for its logs unless --delete-chief."""
    record = reporter.record()  # as this process finds the job: its attempt, its start
    reporter.spec()
    # Who the pods run as, decided for the namespace (the record keeps what was asked).
    namespace = kube.read("Namespace", None, settings.namespace)
    settings = podsecurity.for_namespace(settings, namespace and namespace["metadata"])
    # Post-training follows pods that exist: a RuntimeClass gone meanwhile is no bad input.
    settings = runtimeclass.with_runtime_class(kube, settings, strict=phase != "post-training")
    job = Job(kube, settings, reporter, record, clock)
    followed = phase in FOLLOWED_PHASES
    code = job.drive(until_started=not followed)
    if not followed:
        return ending.Ending(code)
    return ending.Ending(code, tear_down=True, keep_chief=not settings.delete_chief,
                         outcome=(code, "training finished" if code == 0 else f"chief exited with code {code}"))
