"""poll_until: the value once it holds; a failure that says what was awaited, in time. Its
looks are a fake clock's: a look every interval, read off the clock, no real time spent."""

import itertools
from collections.abc import Callable, Iterator

import pytest

from distributetrain.core.clock import FakeClock
from harness.polling import poll_until


def looked_at(clock: FakeClock, answers: Iterator) -> tuple[list[float], Callable]:
    """The clock's time at each look, and a check giving ``answers`` in turn."""
    times = []

    def check():
        times.append(clock.monotonic())
        return next(answers)

    return times, check


def test_returns_the_first_truthy_value_looking_every_interval():
    clock = FakeClock(start=0.0)
    times, check = looked_at(clock, iter([None, 0, "", "found", "later"]))
    assert poll_until(check, 5, "an answer", interval_s=0.25, clock=clock) == "found"
    assert times == [0.0, 0.25, 0.5, 0.75]


def test_gives_up_at_the_timeout_with_what_was_awaited_after_one_last_look():
    clock = FakeClock(start=0.0)
    times, check = looked_at(clock, itertools.repeat(None))
    with pytest.raises(AssertionError, match=r"the pod Ready: last seen Pending \(not within 1s\)"):
        poll_until(check, 1, lambda: "the pod Ready: last seen Pending", interval_s=0.25, clock=clock)
    assert times == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]


def test_a_hopeless_wait_ends_at_once_after_one_last_look():
    clock = FakeClock(start=0.0)
    times, check = looked_at(clock, iter([None, None, "printed just before it exited", "later"]))
    assert poll_until(check, 60, "the line", interval_s=0.25, hopeless=lambda: len(times) >= 2, clock=clock) == \
        "printed just before it exited"
    assert times == [0.0, 0.25, 0.25]
    with pytest.raises(AssertionError, match="cannot happen any more"):
        poll_until(lambda: None, 60, "the line", hopeless=lambda: True, clock=clock)
    assert clock.monotonic() == 0.25
