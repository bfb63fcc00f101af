"""poll_until: the value once it holds; a failure that says what was awaited, in time."""

import time

import pytest

from harness.polling import poll_until


def test_returns_the_first_truthy_value():
    answers = iter([None, 0, "", "found", "later"])
    assert poll_until(lambda: next(answers), 5, "an answer", interval_s=0.01) == "found"


def test_gives_up_at_the_timeout_with_what_was_awaited():
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"the pod Ready: last seen Pending \(not within 0.2s\)"):
        poll_until(lambda: None, 0.2, lambda: "the pod Ready: last seen Pending", interval_s=0.05)
    assert 0.2 <= time.monotonic() - started < 1.0


def test_a_hopeless_wait_ends_at_once_after_one_last_look():
    looks = []

    def check():
        looks.append(1)
        return len(looks) >= 3 and "printed just before it exited"

    assert poll_until(check, 60, "the line", interval_s=0.01, hopeless=lambda: len(looks) >= 2) == \
        "printed just before it exited"
    with pytest.raises(AssertionError, match="cannot happen any more"):
        poll_until(lambda: None, 60, "the line", hopeless=lambda: True)
