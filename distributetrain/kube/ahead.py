"""A paged list read one page ahead: the next page is requested while the caller works on
this one, so the API server encodes it meanwhile instead of idling.

Only the request and the read of its body run on the second thread (the socket and TLS
release the interpreter lock); decoding stays with the caller, so memory holds two pages
at most. A page's error is raised when the caller asks for that page. A caller that stops
early waits for the request in flight, and no further attempt is made.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from distributetrain.core import errors

P = TypeVar("P")


def pages_ahead(fetch: Callable[[str, threading.Event], P], next_token: Callable[[P], str]) -> Iterator[P]:
    """``fetch(token, stopped)`` for each page, from "" until ``next_token`` of a page is
    empty. ``fetch`` checks ``stopped`` before each attempt (``stopped_error``)."""
    stopped = threading.Event()
    with ThreadPoolExecutor(1, thread_name_prefix="list-ahead") as pool:
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
