"""Work on a thread of its own, its outcome in a future: what a turn at the placement
Lease does beside its own requests (the queue's list, the journal's read)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def beside(work: Callable[[], T], name: str) -> Future[T]:
    """``work`` on a daemon thread named ``name`` (its requests have their deadlines); its
    result or exception in the future, raised where it is asked for."""
    outcome: Future[T] = Future()

    def run() -> None:
        try:
            outcome.set_result(work())
        except BaseException as e:  # noqa: BLE001 - raised where the result is asked for
            outcome.set_exception(e)

    threading.Thread(target=run, name=name, daemon=True).start()
    return outcome
