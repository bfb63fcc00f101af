"""The tests' one way to wait for something that is not watched: poll a check until it
holds, and fail saying what was awaited and what was last seen."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from distributetrain.core.clock import Clock, RealClock

T = TypeVar("T")


def poll_until(check: Callable[[], T], timeout_s: float, what: str | Callable[[], str], interval_s: float = 0.5,
               hopeless: Callable[[], bool] = lambda: False, clock: Clock = RealClock()) -> T:
    """``check()``'s first truthy value, tried every ``interval_s``. AssertionError with
    ``what`` (a text, or a function that describes the state then) once ``timeout_s`` has
    passed, or as soon as ``hopeless()`` says waiting longer cannot help (a container that
    exited); ``check`` is tried once more first, for what happened just before. Time is
    ``clock``'s: real time for the cluster tiers, whose cluster says nothing when it
    changes; a unit test gives it a fake one (``test_no_sleep``)."""
    give_up_at = clock.monotonic() + timeout_s
    while True:
        if result := check():
            return result
        ended = hopeless()
        if ended or clock.monotonic() >= give_up_at:
            if result := check():
                return result
            said = what() if callable(what) else what
            raise AssertionError(f"{said} ({'gave up: it cannot happen any more' if ended else f'not within {timeout_s:g}s'})")
        clock.sleep(interval_s)
