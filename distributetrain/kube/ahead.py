"""A paged list read one page ahead: the next page is requested while the caller works on
this one, so the API server encodes it meanwhile instead of idling.

Only the request and the read of its body run on the second thread (the socket and TLS
release the interpreter lock); decoding stays with the caller, so memory holds two pages
at most. A page's error is raised when the caller asks for that page. A caller that stops
early waits for the request in flight, and no further attempt is made.

The reading thread needs the interpreter lock back after every read of the socket (some
16 KiB), and a caller busy decoding hands it over only every switch interval (5 ms by
default): 30 MB read beside a decoding loop took 1.5-2 s at 5 ms and 0.2 s at 0.5 ms
(the convoy effect). While pages are read ahead the interval is ``SWITCH_INTERVAL_S``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from distributetrain.core import errors

P = TypeVar("P")

SWITCH_INTERVAL_S = 0.0005


def pages_ahead(fetch: Callable[[str, threading.Event], P], next_token: Callable[[P], str]) -> Iterator[P]:
    """``fetch(token, stopped)`` for each page, from "" until ``next_token`` of a page is
    empty. ``fetch`` checks ``stopped`` before each attempt (``stopped_error``)."""
    stopped = threading.Event()
    with _quick_switches.held(), ThreadPoolExecutor(1, thread_name_prefix="list-ahead") as pool:
        try:
            page = fetch("", stopped)  # on the caller's thread: a list of one page starts no thread
            while True:
                token = next_token(page)
                ahead = pool.submit(fetch, token, stopped) if token else None
                yield page
                if ahead is None:
                    return
                page = ahead.result()
        finally:
            stopped.set()  # before the pool's exit waits for the page in flight


def stopped_error(what: str) -> errors.ApiError:
    """What a fetch raises when its list was abandoned: no attempt at a page nobody reads."""
    return errors.ApiError(f"{what}: the reader stopped")


class _QuickSwitches:
    """The interpreter's switch interval at ``SWITCH_INTERVAL_S`` while any list is read
    ahead (it is process-wide: the first reader sets it, the last puts it back)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readers = 0
        self._before = 0.0

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._readers == 0:
                self._before = sys.getswitchinterval()
                sys.setswitchinterval(min(self._before, SWITCH_INTERVAL_S))
            self._readers += 1
        try:
            yield
        finally:
            with self._lock:
                self._readers -= 1
                if self._readers == 0:
                    sys.setswitchinterval(self._before)


_quick_switches = _QuickSwitches()
