"""An API server of revisions, stepped one call at a time: the booking's interleavings.

Several managers run the real booking code (``manager.booking.book``), each on a thread
of its own, against this store; every call one of them makes is one step, and one
manager steps at a time, in the order a ``Tape`` of choices gives (hypothesis draws
it), so each interleaving runs deterministically. What it keeps of the API server is what the booking's
proof rests on, and no more:

- one revision counter (etcd's), moved on by every write; every object remembers the
  revisions it was created and deleted at, so the store can be read as it was;
- a list read at a revision the draw picks: a list with ``resourceVersion`` X and
  ``NotOlderThan`` (a watch cache that may lag, but not behind X) at any revision from X
  on; a consistent list (no resourceVersion: the bookings', the survey's of every pod)
  at the latest, as the API server serves it (from etcd, or from a watch cache it first
  brings up to etcd's revision);
- the Lease and the booking journal's ConfigMap: create (AlreadyExists), and updates
  that carry the resourceVersion they read (Conflict otherwise), as the placement lock and
  the journal use them; reads of either at the latest revision (a GET is consistent).

Pods never start, end or move: a booked pod keeps its GPUs, which is the case the rule
"no GPU booked twice" is about.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from distributetrain.core import errors, names
from distributetrain.core.placement import inventory


class Tape:
    """The choices of one interleaving, read off a tape of numbers hypothesis draws in
    the test's thread (a draw cannot be made on the managers' threads). Past its end the
    managers take turns, one call each, and every read is of a revision as old as allowed
    (``Tape([])`` is that interleaving): a manager waiting for the Lease never starves
    its holder of steps."""

    def __init__(self, numbers: list[int]):
        self.numbers = list(numbers)
        self.turns_past_the_end = 0

    def integer(self, low: int, high: int, label: str) -> int:
        return low + (self.numbers.pop(0) if self.numbers else 0) % (high - low + 1)

    def one_of(self, options: list[str], label: str) -> str:
        if self.numbers:
            return options[self.numbers.pop(0) % len(options)]
        self.turns_past_the_end += 1
        return options[self.turns_past_the_end % len(options)]


class Stepper:
    """Whose turn it is: the chosen manager, among those still running."""

    def __init__(self, choices: Tape, managers: list[str]):
        self.choices = choices
        self.running = list(managers)
        self.current: str | None = None
        self._free = True
        self._turns = threading.Condition()
        self._mine = threading.local()
        self._next()

    def run_as(self, manager: str, work: Callable[[], object]) -> Callable[[], object]:
        """``work`` on a manager's thread: its calls are that manager's steps."""

        def run():
            self._mine.name = manager
            try:
                return work()
            finally:
                with self._turns:
                    self.running.remove(manager)
                    if self.current == manager:
                        self._next()
                    self._turns.notify_all()

        return run

    def _next(self) -> None:
        self.current = self.choices.one_of(sorted(self.running), "next step by") if self.running else None

    @contextmanager
    def step(self) -> Iterator[None]:
        manager = getattr(self._mine, "name", None)
        with self._turns:
            # A thread of no manager's (a Lease renewer) steps outside the schedule.
            while manager is not None and not (self._free and self.current == manager):
                self._turns.wait()
            self._free = False
        try:
            yield
        finally:
            with self._turns:
                self._free = True
                if manager is not None:
                    self._next()
                self._turns.notify_all()


class RevisionedKube:
    """The calls ``booking.book`` makes, on a store read at drawn revisions."""

    def __init__(self, stepper: Stepper, nodes: list[dict], pods: list[dict]):
        self.stepper = stepper
        self.choices = stepper.choices
        self.revision = 1
        self.nodes = copy.deepcopy(nodes)
        self.pods: dict[str, tuple[dict, int, float]] = {}  # name -> (pod, created at, deleted at)
        self.objects: dict[str, dict] = {}  # by kind: the Lease, the journal's ConfigMap
        self.refused: set[str] = set()  # kinds whose reads RBAC refuses (the journal's, with an older rbac/)
        for pod in pods:
            self._write_pod(pod)

    def _write_pod(self, pod: dict) -> dict:
        self.revision += 1
        pod = copy.deepcopy(pod)
        pod["metadata"]["resourceVersion"] = str(self.revision)
        created = self.pods[pod["metadata"]["name"]][1] if pod["metadata"]["name"] in self.pods else self.revision
        self.pods[pod["metadata"]["name"]] = (pod, created, float("inf"))
        return pod

    def _pods_at(self, revision: int) -> list[dict]:
        return [copy.deepcopy(pod) for pod, created, deleted in self.pods.values() if created <= revision < deleted]

    # -- reads ----------------------------------------------------------------------------
    def list_pages(self, kind: str, namespace: str | None = None, **selectors: str):
        assert kind == "Node"
        with self.stepper.step():
            yield copy.deepcopy(self.nodes), str(self.revision)

    def each_pod_request(self, visit, restart, **selectors: str) -> str:
        with self.stepper.step():
            version = selectors.get("resource_version")
            if version:
                assert selectors.get("resource_version_match") == "NotOlderThan"
                at = self.choices.integer(int(version), self.revision, "bookings read at")
            else:
                at = self.revision  # a consistent list
            restart()
            wanted = selectors.get("label_selector") == names.BOOKINGS_SELECTOR
            for pod in self._pods_at(at):
                if not wanted or names.is_booking(pod["metadata"].get("labels") or {}):
                    visit(pod)
            return str(at)

    # -- writes ---------------------------------------------------------------------------
    def list_all(self, kind: str, namespace: str | None = None, **selectors: str) -> tuple[list[dict], str]:
        """The pods that carry the label selector's key (the Lease's queue), consistent."""
        assert kind == "Pod" and namespace is None and selectors["field_selector"] == inventory.ACTIVE_PODS_SELECTOR
        with self.stepper.step():
            key = selectors["label_selector"]
            return [pod for pod in self._pods_at(self.revision)
                    if key in (pod["metadata"].get("labels") or {})], str(self.revision)

    def patch(self, kind: str, namespace: str, name: str, patch: dict) -> dict:
        """A merge patch of a pod's annotations and labels (None removes one)."""
        assert kind == "Pod" and set(patch["metadata"]) <= {"annotations", "labels"}
        with self.stepper.step():
            pod = copy.deepcopy(self.pods[name][0])
            for field, changes in patch["metadata"].items():
                values = pod["metadata"].setdefault(field, {})
                for key, value in changes.items():
                    if value is None:
                        values.pop(key, None)
                    else:
                        values[key] = value
            return self._write_pod(pod)

    def create_all_owned(self, objs: list[dict]) -> list[dict]:
        created = []
        for obj in objs:
            with self.stepper.step():
                created.append(self._write_pod(obj))
        return created

    # -- the Lease, the journal ---------------------------------------------------------------
    @property
    def lease(self) -> dict | None:
        return self.objects.get("Lease")

    def read(self, kind: str, namespace: str, name: str) -> dict | None:
        assert kind in ("Lease", "ConfigMap")
        with self.stepper.step():
            if kind in self.refused:
                raise errors.forbidden(f'{kind} "{name}" is forbidden')
            return copy.deepcopy(self.objects.get(kind))

    def create(self, obj: dict) -> dict:
        with self.stepper.step():
            if obj["kind"] in self.objects:
                raise errors.AlreadyExists(f"{obj['kind']} {name_of(obj)} already exists")
            return self._write(obj)

    def update(self, obj: dict) -> dict:
        with self.stepper.step():
            if obj["metadata"].get("resourceVersion") != self.objects[obj["kind"]]["metadata"]["resourceVersion"]:
                raise errors.Conflict(f"{obj['kind']} {name_of(obj)}: the object has been modified")
            return self._write(obj)

    def _write(self, obj: dict) -> dict:
        assert obj["kind"] in ("Lease", "ConfigMap")
        self.revision += 1
        stored = self.objects[obj["kind"]] = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.revision)
        return copy.deepcopy(stored)

    def watch(self, kind: str, namespace: str, resource_version: str, timeout_s: float, **selectors: str):
        """The Lease's change since ``resource_version`` at once; else nothing (the caller looks again)."""
        assert kind == "Lease"
        with self.stepper.step():
            changed = self.lease is not None and self.lease["metadata"]["resourceVersion"] != resource_version
            lease = copy.deepcopy(self.lease)
        if changed:
            yield "MODIFIED", lease


def name_of(obj: dict) -> str:
    return obj["metadata"]["name"]
