"""A paged list read one page ahead: the next request goes out while the caller works."""

import sys
import threading

import pytest

from distributetrain.kube.ahead import SWITCH_INTERVAL_S, pages_ahead

WAIT_S = 5.0


class Pages:
    """A list of pages "0", "1", ... whose fetches are recorded, one of them failing on demand."""

    def __init__(self, count, failing=None):
        self.count, self.failing = count, failing
        self.fetched, self.threads = [], []
        self.asked = {i: threading.Event() for i in range(count)}

    def fetch(self, token, stopped):
        index = int(token or 0)
        self.fetched.append(index)
        self.threads.append(threading.current_thread())
        self.asked[index].set()
        if stopped.is_set():
            raise RuntimeError("stopped")
        if index == self.failing:
            raise ValueError(f"page {index} failed")
        return index

    def next_token(self, page):
        return str(page + 1) if page + 1 < self.count else ""


def test_the_next_page_is_asked_for_while_the_caller_works_on_this_one():
    pages = Pages(3)
    seen = []
    for page in pages_ahead(pages.fetch, pages.next_token):
        if page + 1 < 3:
            assert pages.asked[page + 1].wait(WAIT_S)  # before this page's work is done
        seen.append(page)
    assert seen == [0, 1, 2] and pages.fetched == [0, 1, 2]


def test_a_single_page_is_read_on_the_callers_thread():
    pages = Pages(1)
    assert list(pages_ahead(pages.fetch, pages.next_token)) == [0]
    assert pages.threads == [threading.current_thread()]


def test_a_page_s_error_comes_when_that_page_is_asked_for():
    pages = Pages(3, failing=1)
    reading = pages_ahead(pages.fetch, pages.next_token)
    assert next(reading) == 0
    with pytest.raises(ValueError, match="page 1 failed"):
        next(reading)
    assert pages.fetched == [0, 1]


def test_a_caller_that_stops_early_leaves_no_request_behind():
    pages = Pages(5)
    reading = pages_ahead(pages.fetch, pages.next_token)
    assert next(reading) == 0
    assert pages.asked[1].wait(WAIT_S)
    reading.close()  # waits for the page in flight; none after it
    assert pages.fetched == [0, 1]
    assert not any(thread.is_alive() for thread in pages.threads if thread is not threading.current_thread())


def test_the_reading_thread_gets_the_interpreter_lock_quickly_while_pages_are_read_ahead():
    """A caller busy decoding hands the lock to the reader every switch interval: the
    interval is short while any list is read ahead, and as before once the last one ends,
    however it ends."""
    before = sys.getswitchinterval()
    first, second = Pages(3), Pages(3, failing=2)
    outer = pages_ahead(first.fetch, first.next_token)
    next(outer)
    assert sys.getswitchinterval() == SWITCH_INTERVAL_S
    with pytest.raises(ValueError):
        for _ in pages_ahead(second.fetch, second.next_token):
            assert sys.getswitchinterval() == SWITCH_INTERVAL_S
    assert sys.getswitchinterval() == SWITCH_INTERVAL_S  # the outer list still reads ahead
    assert list(outer) == [1, 2]
    assert sys.getswitchinterval() == before
