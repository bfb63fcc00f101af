"""The one clock of the manager and the CLI: monotonic time, the wall clock, sleeps and
timed waits, injected.

Every window and deadline (a watch's deadline, a node's not-Ready window, a retry's
delay) and every timestamp written (an Event's, a Lease's) reads this clock rather than
``time``, so a test steps a ``FakeClock`` through a 30 s window instead of sleeping it
out (as client-go's ``k8s.io/utils/clock/testing`` does). Each process makes one
``RealClock`` at its entry and passes it down: no parameter defaults to it, so a missed
argument is an error, not real time in a test (``tests/unit/test_clock_rule.py``).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

# A FakeClock's timed wait lasts at most this long (real seconds), the caller then looking
# again at what it waits for and at the clock.
FAKE_WAIT_POLL_S = 0.01


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def now(self) -> float:
        """The wall clock, seconds since the epoch: for timestamps other processes read."""
        ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, condition: threading.Condition, seconds: float) -> bool:
        """``condition.wait`` (the caller holds it) for at most ``seconds`` of this clock;
        whether it was notified. It may end sooner, as a condition's wait may: callers wait
        in a loop on what they wait for and on the clock."""
        ...


def monotonic_at(clock: Clock, wall_time: float) -> float:
    """``wall_time`` (seconds since the epoch, as another process wrote it) as a time of
    ``clock``'s monotonic time, both read at one moment."""
    return clock.monotonic() + (wall_time - clock.now())


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait(self, condition: threading.Condition, seconds: float) -> bool:
        return condition.wait(max(0.0, seconds))


class FakeClock:
    """A clock that moves only when told: ``advance``, or a ``sleep`` (which returns at
    once, the time slept having passed). A timed wait ends when notified, and otherwise
    after FAKE_WAIT_POLL_S of real time, the clock moved or not: its caller's loop sees
    whether another thread advanced it past the wait's end. (Waiting on until then here
    would miss a notify that came as a slice of the wait timed out: a condition's wait
    then says "not notified", and nothing would notify again.) ``waiters`` (client-go's
    fake clock's ``HasWaiters``) lets a test advance once the thread it steps is waiting,
    not before that thread read the time its wait ends at."""

    def __init__(self, start: float = 1000.0, wall_start: float = 1_767_225_600.0):  # 2026-01-01T00:00:00Z
        self._now = start
        self._wall_offset = wall_start - start  # the wall clock moves with the monotonic one
        self._lock = threading.Lock()
        self._waiters = 0

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def now(self) -> float:
        with self._lock:
            return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += max(0.0, seconds)

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def waiters(self) -> int:
        """How many timed waits are in progress."""
        with self._lock:
            return self._waiters

    def wait(self, condition: threading.Condition, seconds: float) -> bool:
        if seconds <= 0:
            return False
        with self._lock:
            self._waiters += 1
        try:
            return condition.wait(FAKE_WAIT_POLL_S)
        finally:
            with self._lock:
                self._waiters -= 1
