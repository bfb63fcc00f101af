"""Waiting in a unit test for what another thread does, without sleeping: a wait looks
again each time the object it watches says it changed (a FakeKube's call, a request to the
HTTP fake, a clock's timed wait starting or ending), or joins the thread whose end it
awaits, and fails past its bound saying what it awaited.
(``polling.poll_until`` sleeps between looks: for the cluster tiers, whose cluster says
nothing when it changes.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from distributetrain.core.clock import FakeClock

T = TypeVar("T")


class Changes:
    """A count of changes, and a wait for the next one."""

    def __init__(self) -> None:
        self._count = 0
        self._changed = threading.Condition()

    def note(self) -> None:
        with self._changed:
            self._count += 1
            self._changed.notify_all()

    def seen(self) -> int:
        with self._changed:
            return self._count

    def wait_past(self, seen: int, until: float) -> None:
        """Until a change after ``seen``, or ``until`` (real, ``time.monotonic``) passes."""
        with self._changed:
            while self._count == seen and (left := until - time.monotonic()) > 0:
                self._changed.wait(left)


def wait_until(check: Callable[[], T], changes: Changes, timeout_s: float, what: str | Callable[[], str]) -> T:
    """``check()``'s first truthy value, looked at now and after each of ``changes``;
    AssertionError with ``what`` once ``timeout_s`` (real seconds, a bound for a broken
    test, never waited out by a passing one) has passed. ``check`` runs holding no lock."""
    give_up_at = time.monotonic() + timeout_s
    while True:
        seen = changes.seen()
        if result := check():
            return result
        if time.monotonic() >= give_up_at:
            said = what() if callable(what) else what
            raise AssertionError(f"{said} (not within {timeout_s:g}s)")
        changes.wait_past(seen, give_up_at)


def threads_end(name: str, timeout_s: float = 5.0) -> None:
    """Every running thread named ``name`` ends (joined); AssertionError past ``timeout_s``
    (real seconds, a bound for a broken test) for one still running."""
    give_up_at = time.monotonic() + timeout_s
    for thread in [t for t in threading.enumerate() if t.name == name]:
        thread.join(max(0.0, give_up_at - time.monotonic()))
        if thread.is_alive():
            raise AssertionError(f"thread {name} still running (not within {timeout_s:g}s)")


class _Announced:
    """A condition whose ``wait`` first notes a change (the clock's waiter count has moved)."""

    def __init__(self, condition: threading.Condition, changes: Changes):
        self._condition = condition
        self._changes = changes

    def wait(self, timeout: float | None = None) -> bool:
        self._changes.note()
        return self._condition.wait(timeout)


class WatchedClock(FakeClock):
    """A ``FakeClock`` whose timed waits, as they start and end, are ``changes``: a test
    waits for "the thread it steps is waiting" (``waiters``) instead of polling for it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.changes = Changes()

    def wait(self, condition: threading.Condition, seconds: float) -> bool:
        try:
            return super().wait(_Announced(condition, self.changes), seconds)
        finally:
            self.changes.note()

    def advance(self, seconds: float) -> None:
        super().advance(seconds)
        self.changes.note()

    def wait_for_waiters(self, count: int, timeout_s: float = 5.0) -> None:
        wait_until(lambda: self.waiters() == count, self.changes, timeout_s, f"{count} waits on the clock")
