"""The fake clock the tests of windows and deadlines step instead of sleeping."""

import threading

from distributetrain.core.clock import REAL_CLOCK, FakeClock
from harness.polling import poll_until


def test_a_fake_clock_moves_only_when_told():
    clock = FakeClock(start=10.0)
    assert clock.monotonic() == 10.0
    clock.sleep(2.5)  # at once: the time slept has passed
    clock.advance(0.5)
    assert clock.monotonic() == 13.0


def test_a_timed_wait_on_a_fake_clock_ends_when_notified_or_when_the_clock_passes_its_end():
    clock, condition = FakeClock(), threading.Condition()

    def advance_once_waited_on():
        poll_until(lambda: clock.waiters() == 1, 5, "a wait on the clock", interval_s=0.005)
        clock.advance(30)

    with condition:
        threading.Thread(target=advance_once_waited_on, daemon=True).start()
        assert clock.wait(condition, 30) is False  # advanced to its end by another thread
    assert clock.waiters() == 0

    def notify():
        with condition:
            condition.notify_all()

    with condition:
        threading.Timer(0.05, notify).start()
        assert clock.wait(condition, 30) is True and clock.monotonic() == 1030.0


def test_the_real_clock_waits_for_real():
    condition = threading.Condition()
    with condition:
        assert REAL_CLOCK.wait(condition, 0.01) is False
