"""The one stand-in for the Events API (``kube.events.EventsApi``) in the unit tests.

It keeps what the manager recorded in order, two ways: ``created`` holds every Event as
sent (a repeat: the first Event again, with the patch's series, as the apiserver would
show it) and ``calls`` says which call each was, as (verb, reason, note or count). What a
test scripts: the API's faults. The code under test records through the manager's own
``EventRecorder`` on it (``recording``), never through a recorder of the test's.
"""

from __future__ import annotations

import threading

from distributetrain.core import errors
from distributetrain.core.clock import Clock
from distributetrain.core.settings import JobSettings
from distributetrain.kube.events import EventRecorder
from distributetrain.manager.reporting import jobevents


class FakeEventsApi:
    def __init__(self, fail_with: BaseException | None = None, block: threading.Event | None = None,
                 expire_at_once: bool = False, refusals: int = 0):
        self.created: list[dict] = []
        self.calls: list[tuple] = []
        self.stored: dict[str, dict] = {}
        self.fail_with = fail_with  # what every create raises
        self.block = block  # creates wait for it: an API that hangs
        self.expire_at_once = expire_at_once  # every Event's time to live has passed when it is patched
        self.refusals = refusals  # the first creates are forbidden

    def create(self, event: dict) -> None:
        if self.block is not None:
            self.block.wait()
        if self.fail_with is not None:
            raise self.fail_with
        if self.refusals:
            self.refusals -= 1
            raise errors.Forbidden("RBAC: not yet")
        self.calls.append(("create", event["reason"], event["note"]))
        self.stored[event["metadata"]["name"]] = event
        self.created.append(event)

    def patch(self, namespace: str, name: str, patch: dict) -> None:
        # The same reason and note again: the first Event's series count goes up.
        if name not in self.stored or self.expire_at_once:
            raise errors.NotFound(f"events {name} not found")
        first = self.stored[name]
        self.calls.append(("patch", first["reason"], patch["series"]["count"]))
        self.created.append(first | {"series": patch["series"]})

    def notes(self) -> list[tuple[str, str]]:
        """(reason, note) of every Event created, in order: repeats left out."""
        return [(reason, note) for verb, reason, note in self.calls if verb == "create"]

    def recorded(self) -> list[tuple[str, str]]:
        """(reason, note) of every Event recorded, in order, a repeat as often as it came."""
        return [(event["reason"], event["note"]) for event in self.created]


def recording(settings: JobSettings, clock: Clock) -> tuple[EventRecorder, FakeEventsApi]:
    """The job's ``EventRecorder`` on a ``FakeEventsApi``: ``close`` it to read what it sent."""
    api = FakeEventsApi()
    return EventRecorder(settings, api, clock, jobevents.KINDS), api
