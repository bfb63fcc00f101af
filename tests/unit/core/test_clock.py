"""The fake clock the tests of windows and deadlines step instead of sleeping."""

import threading
import time

from distributetrain.core.clock import FakeClock, RealClock
from harness.waiting import WatchedClock


def test_a_fake_clock_moves_only_when_told():
    clock = FakeClock(start=10.0)
    assert clock.monotonic() == 10.0
    clock.sleep(2.5)  # at once: the time slept has passed
    clock.advance(0.5)
    assert clock.monotonic() == 13.0


def wait_in_a_loop(clock, condition, seconds, done=lambda: False) -> None:
    """How callers wait on a clock: until ``done()`` or ``seconds`` of the clock passed."""
    ends_at = clock.monotonic() + seconds
    with condition:
        while not done() and (left := ends_at - clock.monotonic()) > 0:
            clock.wait(condition, left)


def test_a_timed_wait_on_a_fake_clock_is_a_slice_of_real_time_that_moves_nothing():
    clock, condition = FakeClock(), threading.Condition()
    started = time.monotonic()
    with condition:
        assert clock.wait(condition, 30) is False  # neither notified nor advanced
        assert clock.wait(condition, 0) is False
    assert time.monotonic() - started < 1 and clock.monotonic() == 1000.0 and clock.waiters() == 0


def test_a_wait_on_a_fake_clock_ends_once_another_thread_advances_it_past_its_end():
    clock, condition = WatchedClock(), threading.Condition()

    def advance_once_waited_on():
        clock.wait_for_waiters(1)
        clock.advance(29)
        clock.advance(1)

    threading.Thread(target=advance_once_waited_on, daemon=True).start()
    wait_in_a_loop(clock, condition, 30)
    assert clock.monotonic() == 1030.0


def test_a_wait_on_a_fake_clock_ends_when_what_it_waits_for_is_notified():
    clock, condition, done = WatchedClock(), threading.Condition(), threading.Event()

    def notify_once_waited_on():
        clock.wait_for_waiters(1)
        with condition:
            done.set()
            condition.notify_all()

    threading.Thread(target=notify_once_waited_on, daemon=True).start()
    wait_in_a_loop(clock, condition, 30, done.is_set)
    assert done.is_set() and clock.monotonic() == 1000.0


def test_the_real_clock_waits_for_real():
    condition = threading.Condition()
    with condition:
        assert RealClock().wait(condition, 0.01) is False
