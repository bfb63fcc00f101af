"""One informer per kind in a process, shared by everyone who follows it.

An elastic job short of GPUs follows the Nodes twice over: the node watch (a lost node)
and the free GPUs (a node that frees up). Two informers of one kind would be two watches
on the API server and two stores of every Node in a manager sized for one, so each kind
(with its namespace, selectors and projection) has one ``Informer`` per API client in a
process, as client-go's ``SharedInformerFactory`` gives: each user opens a
``Subscription``, which adds its handler (handed the store as it stands, if listed
already) and, while entered, runs the informer on its thread. The informer stops when
its last user leaves (and with the process: its thread is a daemon).

The first user's ``client`` and options make the informer; later users share it as it is.
A projection is part of the identity: users of one informer read one form of the object.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from distributetrain.core.clock import Clock
from distributetrain.kube.client import KubeApi
from distributetrain.kube.informer import Change, Handler, Informer, keep_whole

_LOCK = threading.Lock()
# By the manager's API client (weakly: a client gone takes its informers' records with it).
_SHARED: weakref.WeakKeyDictionary[object, dict[tuple, _Shared]] = weakref.WeakKeyDictionary()


@dataclass
class _Shared:
    informer: Informer
    users: int = 0
    running: bool = False


def _key(kind: str, namespace: str | None, selectors: Mapping[str, str] | None, keep: Callable) -> tuple:
    return kind, namespace, tuple(sorted((selectors or {}).items())), keep


def open_informers(kube: object) -> list[Informer]:
    """The informers users of ``kube`` share now (for tests and benchmarks)."""
    with _LOCK:
        return [shared.informer for shared in _SHARED.get(kube, {}).values()]


class Subscription:
    """One user's share of the informer of ``kind``: its handlers, and while entered (a
    context manager) the informer running on its thread. ``close`` (or leaving the
    ``with``) takes its handlers off; the last user's close stops the informer."""

    def __init__(self, kube: KubeApi, kind: str, namespace: str | None = None, *,
                 selectors: Mapping[str, str] | None = None, keep: Callable[[dict], Any] = keep_whole,
                 clock: Clock, client: Callable[[KubeApi], KubeApi] | None = None, **options: float):
        """``client``: the API client the informer uses, made from ``kube`` (its own
        connections) when this user is the first; ``options``: ``Informer``'s."""
        self._kube = kube
        self._key = _key(kind, namespace, selectors, keep)
        with _LOCK:
            informers = _SHARED.setdefault(kube, {})
            if (shared := informers.get(self._key)) is None:
                informer = Informer((client or (lambda same: same))(kube), kind, namespace, selectors=selectors,
                                    keep=keep, clock=clock, **options)
                shared = informers[self._key] = _Shared(informer)
            shared.users += 1
        self._shared = shared
        self.informer = shared.informer
        self._handlers: list[Handler] = []
        self._closed = False

    def add_handler(self, handler: Handler) -> None:
        """As ``Informer.add_handler``; handed at once what the informer holds, if it has listed."""
        with self.informer.changed:
            self.informer.add_handler(handler)
            self._handlers.append(handler)
            if self.informer.synced:
                handler([Change("ADDED", key, None, value) for key, value in self.informer.store.items()])

    def __enter__(self) -> Subscription:
        with _LOCK:
            if not self._shared.running:
                self._shared.running = True
                self.informer.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for handler in self._handlers:
            self.informer.remove_handler(handler)
        with _LOCK:
            self._shared.users -= 1
            if self._shared.users:
                return
            informers = _SHARED.get(self._kube, {})
            if informers.get(self._key) is self._shared:
                del informers[self._key]
            if self._shared.running:
                self.informer.__exit__(None, None, None)
