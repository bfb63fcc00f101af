"""One informer per kind: every watch of the manager lists once, then follows a watch.

An ``Informer`` follows one kind of ``kube.resources`` ("Pod", "Node", core/v1 "Event",
"ResourceQuota", the DRA GPUs' "ResourceSlice" and "ResourceClaim": ``kube.dra``),
in one namespace or all, with a label or field selector, as client-go's Reflector and
SharedInformer do: it lists (page by page), then watches from the list's resourceVersion with bookmarks, each watch call
resumed from the last version seen (``Kube.watch`` chains short requests and
reconnects broken streams). It lists again only when it must: at once when that version
is too old (410 Gone), ``relist_delay_s`` after a watch that ended with an error or an
API unreachable past its retry deadline; never a busy loop, never an abort. Any other
API error (a missing permission) is raised to whoever waits.

What it follows sits in ``store`` (key -> object, what ``keep`` returns of it; deleted
objects and those ``keep`` drops are not there), and every change is handed to the
handlers, one batch per list (the differences from the store) and one per event. So a
phase reads a live cache instead of listing again: ``wait_until(predicate, deadline)``
returns ``Satisfied(value)`` once the predicate gives a value, or ``DeadlineReached``
with the last view.

It runs inline (``wait_until`` drives the list and the watch in the caller's thread) or
on a thread of its own (``start``, or ``with informer:``), then ``wait_until`` waits for
its changes. A store lags what the caller itself just wrote (the watch has not delivered
it yet): ``relist`` has the next judgement wait for a fresh list.
This module is the only one that calls the client's watches.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from distributetrain.core import errors
from distributetrain.core.clock import Clock
from distributetrain.kube.client import KubeApi

log = logging.getLogger(__name__)

T = TypeVar("T")

RELIST_DELAY_S = 0.5  # after a failed watch or list: never a busy loop
# One watch call on an informer's own thread: how soon it notices it was told to stop.
THREAD_SPAN_S = 5.0


@dataclass(frozen=True)
class Change:
    """One object's change in the store: ``old`` None when added, ``new`` None when removed."""

    type: str  # ADDED, MODIFIED or DELETED
    key: str
    old: Any
    new: Any


@dataclass(frozen=True)
class Satisfied(Generic[T]):
    value: T


@dataclass(frozen=True)
class DeadlineReached:
    last_view: dict[str, Any] = field(default_factory=dict)


Handler = Callable[[Sequence[Change]], None]
Predicate = Callable[[Mapping[str, Any]], T | None]


def keep_whole(obj: dict) -> dict:
    return obj


class Informer:
    """Follows one kind in one namespace (None: every namespace) with ``selectors``
    (``label_selector``, ``field_selector``). ``keep`` decides what the store holds of
    each object (None: not held), so following every pod of a large cluster keeps only
    the few that matter. Keys are names, or namespace/name across namespaces."""

    def __init__(self, kube: KubeApi, kind: str, namespace: str | None = None, *,
                 selectors: Mapping[str, str] | None = None, keep: Callable[[dict], Any] = keep_whole,
                 clock: Clock, relist_delay_s: float | None = None, thread_span_s: float = THREAD_SPAN_S):
        self.kube = kube
        self.kind = kind
        self.namespace = namespace
        self.selectors = dict(selectors or {})
        self.keep = keep
        self.clock = clock
        self.relist_delay_s = RELIST_DELAY_S if relist_delay_s is None else relist_delay_s
        self.thread_span_s = thread_span_s
        self.store: dict[str, Any] = {}
        self.synced = False  # listed at least once
        # Fresh lists asked for (``relist``), and the last of them a list has answered.
        self._lists_asked = self._lists_answered = 0
        self.version = ""  # the last resourceVersion seen; "" lists again
        self.changed = threading.Condition(threading.RLock())
        self._handlers: list[Handler] = []
        self._failure: errors.DistributeTrainError | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        where = self.namespace or "all namespaces"
        return f"{self.kind} in {where}" + "".join(f" {value}" for value in self.selectors.values())

    @property
    def failure(self) -> errors.DistributeTrainError | None:
        """What ended its thread (a missing permission); None while it follows."""
        return self._failure

    def add_handler(self, handler: Handler) -> None:
        """``handler`` gets each batch of changes, in the thread that follows, holding ``changed``
        (an empty batch too: a list that changed nothing, an event for an object not kept,
        the informer's thread ending with ``failure``)."""
        self._handlers.append(handler)

    def remove_handler(self, handler: Handler) -> None:
        with self.changed:
            self._handlers.remove(handler)

    def relist(self) -> None:
        """List afresh before the next judgement: the caller has just created objects it
        waits on, which the watch may not have delivered yet (absent, they read as deleted)."""
        with self.changed:
            self._lists_asked += 1

    @property
    def stale(self) -> bool:
        """A fresh list is asked for and not listed yet: the store is not judged meanwhile."""
        return self._lists_answered != self._lists_asked

    # -- on a thread of its own ------------------------------------------------------------
    def start(self) -> None:
        """Follow on a thread of its own from now on, until ``close`` (once: a running informer stays as it is)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._follow, name=f"informer-{self.kind}", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop its thread, if it runs one. Not joined: its watch call ends within
        thread_span_s (at its next event if sooner), and what it applies meanwhile is read by no one."""
        self._stop.set()

    def __enter__(self) -> Informer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _follow(self) -> None:
        try:
            while not self._stop.is_set():
                self.drive(self.clock.monotonic() + self.thread_span_s, lambda _: self._stop.is_set() or None)
        except errors.DistributeTrainError as e:
            log.error("cannot follow %r: %s", self, e)
            with self.changed:
                self._failure = e
                self._hand_on([])  # wakes whoever waits on a handler's state: it reads the failure

    # -- waiting ---------------------------------------------------------------------------
    def wait_until(self, predicate: Predicate[T], deadline: float) -> Satisfied[T] | DeadlineReached:
        """Until ``predicate(store)`` gives a value (not None) or ``deadline`` (of the clock)."""
        tried = self._thread is not None  # inline, the list is tried once whatever the deadline
        while True:
            with self.changed:
                if self._failure is not None:
                    raise self._failure
                if self.synced and not self.stale and (value := predicate(self.store)) is not None:
                    return Satisfied(value)
                remaining = deadline - self.clock.monotonic()
                if remaining <= 0 and tried:
                    return DeadlineReached(dict(self.store))
                if self._thread is not None:
                    self.clock.wait(self.changed, remaining)
                    continue
            self.drive(deadline, predicate)
            tried = True

    def drive(self, until: float, predicate: Predicate[Any]) -> None:
        """In the caller's thread: list if needed, else follow the watch until ``until`` or
        an event after which ``predicate`` gives a value. A failed watch ends it early."""
        try:
            if not self.version or self.stale:
                self._relist()
                return
            remaining = until - self.clock.monotonic()
            if remaining <= 0:
                return
            for event_type, obj in self._watch(remaining):
                self.version = obj["metadata"].get("resourceVersion") or self.version
                if event_type != "BOOKMARK":  # a bookmark only moves the version on
                    with self.changed:
                        self._apply(event_type, obj)
                        if predicate(self.store) is not None or self.stale:
                            return
                if self.clock.monotonic() >= until:
                    return
        except errors.Gone:
            log.info("watch of %r: resourceVersion %s is too old (410 Gone); listing again", self, self.version)
            self.version = ""
        except errors.TransientApiError as e:
            log.warning("watch of %r failed (%s); listing again in %.1fs", self, e, self.relist_delay_s)
            self.version = ""
            self.clock.sleep(self.relist_delay_s)

    # -- the list, the watch, the store ----------------------------------------------------
    def _watch(self, remaining_s: float):
        return self.kube.watch(self.kind, self.namespace, self.version, remaining_s, **self.selectors)

    def key(self, obj: dict) -> str:
        metadata = obj["metadata"]
        if self.namespace is None and metadata.get("namespace"):
            return f"{metadata['namespace']}/{metadata['name']}"
        return metadata["name"]

    def _relist(self) -> None:
        """A fresh list, page by page (only what ``keep`` holds stays in memory); the store
        takes it whole, and the handlers get its differences from the store."""
        listed: dict[str, Any] = {}
        version = ""
        asked = self._lists_asked  # one asked for later may not be in this list
        for page, version in self.kube.list_pages(self.kind, self.namespace, **self.selectors):
            for obj in page:
                if (kept := self.keep(obj)) is not None:
                    listed[self.key(obj)] = kept
        with self.changed:
            old = self.store
            changes = [Change("DELETED", key, value, None) for key, value in old.items() if key not in listed]
            changes += [Change("MODIFIED" if key in old else "ADDED", key, old.get(key), value)
                        for key, value in listed.items() if old.get(key) != value]
            self.store = listed
            self.synced = True
            self._lists_answered = asked
            self.version = version
            self._hand_on(changes)

    def _apply(self, event_type: str, obj: dict) -> None:
        key = self.key(obj)
        old = self.store.get(key)
        new = None if event_type == "DELETED" else self.keep(obj)
        if new is None:
            self.store.pop(key, None)
        else:
            self.store[key] = new
        if old is None and new is None:
            change = []
        else:
            change = [Change("DELETED" if new is None else "ADDED" if old is None else "MODIFIED", key, old, new)]
        self._hand_on(change)

    def _hand_on(self, changes: list[Change]) -> None:
        for handler in list(self._handlers):
            handler(changes)
        self.changed.notify_all()
