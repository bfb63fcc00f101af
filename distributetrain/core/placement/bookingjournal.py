"""The bookings made since a survey, as the holders of the placement Lease record them.

A booking reads the survey (every pod, the bookings among them, at one moment) and, under
the Lease, the bookings made since. Listing the bookings under the Lease scans every pod
of the cluster on the server (0.1 s at 150,000 pods, in every turn of a burst). Instead,
each holder of the Lease appends the pods it created to this journal before it lets the
Lease go, so the next holder reads what was booked since its survey in one small read:

- entries are numbered; a survey reads the journal's next number (its ``position``)
  before it lists the pods, so every entry numbered below it was written, and its pods
  created, before that list: they are in the survey;
- ``first``: the journal holds an entry for every booking created after the entry before
  ``first`` was written. A survey whose position is ``first`` or later therefore finds
  every booking made since it in the entries from its position on (``covers``);
- a holder that wrote no entry (a manager of an older release, one that died in its
  turn, one whose write failed) breaks that: so each writer records the Lease's spec
  as its release will leave it (``Closing``), and the next holder compares it with the
  Lease as it found it (``unbroken``). Any other holder since wrote its own identity and
  acquire time there. A broken journal starts over after the entry of the holder that
  found it broken (``appended``), which lists the bookings under the Lease;
- a survey that finds no journal begins one (``opening``) when no manager is in its turn,
  so that the holders after it trust it from the first.

The proof, with the Lease's: docs/architecture.md, "The booking journal".
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

SCHEMA = 1  # of the encoded form: another is read as no journal (a holder then lists, and starts one)
# The pods its entries hold, the oldest entries going first: far more than the turns one
# survey is used for book (a burst of 100 jobs, a few hundred pods); a survey older than
# them lists the bookings. Every turn reads and writes the whole journal under the Lease:
# 1,000 pods are some 44 KiB (base64), 0.015 s of CPU to encode and decode; capped at
# 256 KiB of bytes instead, a full journal (7,000 pods) was 340 KiB read and written in
# each turn, and 0.15 s of its CPU.
MAX_PODS = 1000
# A ConfigMap holds 1 MiB, and base64 takes a third more: pods of unusual size that
# outgrow this start the journal over after the last entry (``encode``).
MAX_ENCODED_BYTES = 256 * 1024


@dataclass(frozen=True)
class Closing:
    """The placement Lease as a release leaves it: its holder (the successor, or no one),
    acquire time and count of acquisitions. Every acquisition since counts one more and
    writes its own time; a release of an older release writes neither."""

    holder: str | None
    acquire_time: str | None
    acquisitions: int | None

    @classmethod
    def of(cls, spec: Mapping | None) -> Closing:
        """The Lease's spec as a closing; no Lease at all (its first holder creates it) is
        ``NO_LEASE``, which no release writes (each counts its acquisition, or none)."""
        if spec is None:
            return NO_LEASE
        return cls(spec.get("holderIdentity"), spec.get("acquireTime"), spec.get("leaseTransitions"))


NO_LEASE = Closing(None, None, 0)


def opening(lease_spec: Mapping | None, lease_exists: bool) -> Closing | None:
    """Where a journal begun now may start from, read off the placement Lease: no Lease yet,
    or one its last holder let go to no one, counting its acquisition (so every pod that
    holder booked exists already, and any holder since changes what the Lease says); None
    while a manager holds it or is named to, or if the last release counted nothing (an
    older release's, which any of its releases would write the same)."""
    if not lease_exists:
        return NO_LEASE
    spec = lease_spec or {}
    if spec.get("holderIdentity") or spec.get("leaseTransitions") is None:
        return None
    return Closing.of(spec)


@dataclass
class BookingJournal:
    first: int = 0
    entries: list[tuple[int, list[dict]]] = field(default_factory=list)  # (number, the pods its holder created)
    closing: Closing | None = None  # the Lease as its last writer's release leaves it

    @property
    def next(self) -> int:
        """The number the next entry gets: a survey's position."""
        return self.entries[-1][0] + 1 if self.entries else self.first

    def unbroken(self, found: Mapping | None) -> bool:
        """Whether no holder of the Lease since the last entry left the journal out: the
        Lease's spec, as found before this holder took it, is what that entry's writer released."""
        return self.closing is not None and self.closing == Closing.of(found)

    def covers(self, position: int | None) -> bool:
        """Whether every booking made since a survey at ``position`` is in the entries from it
        (the journal also ``unbroken``)."""
        return position is not None and self.first <= position

    def since(self, position: int) -> Iterator[dict]:
        """The pods of the entries numbered ``position`` and later."""
        for number, pods in self.entries:
            if number >= position:
                yield from pods

    def appended(self, pods: list[dict], closing: Closing, unbroken: bool) -> BookingJournal:
        """With an entry for ``pods`` (a holder's, possibly none) and its release's
        ``closing``, the oldest entries gone beyond ``MAX_PODS``. Broken (``unbroken``
        False), or the entry alone beyond it, it starts over after that entry: bookings no
        entry holds may have been made before it."""
        number = self.next
        entries = [*self.entries, (number, pods)]
        kept = sum(len(entered) for _, entered in entries)
        oldest = 0
        while kept > MAX_PODS and oldest < len(entries) - 1:
            kept -= len(entries[oldest][1])
            oldest += 1
        if not unbroken or kept > MAX_PODS:
            return BookingJournal(first=number + 1, closing=closing)
        return BookingJournal(entries[oldest - 1][0] + 1 if oldest else self.first, entries[oldest:], closing)

    def encode(self) -> bytes:
        """Within ``MAX_ENCODED_BYTES``: larger, it is written as started over after its
        last entry (the same closing; surveys before it list the bookings)."""
        encoded = self._encoded()
        if len(encoded) > MAX_ENCODED_BYTES and self.entries:
            return BookingJournal(first=self.next, closing=self.closing)._encoded()
        return encoded

    def _encoded(self) -> bytes:
        closing = None if self.closing is None else {"holder": self.closing.holder,
                                                     "acquireTime": self.closing.acquire_time,
                                                     "acquisitions": self.closing.acquisitions}
        body = {"schema": SCHEMA, "first": self.first, "closing": closing, "entries": self.entries}
        return zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 6)

    @classmethod
    def decode(cls, data: bytes) -> BookingJournal | None:
        """The journal ``encode`` wrote; None for anything else (another schema, damage)."""
        try:
            body = json.loads(zlib.decompress(data))
            if not isinstance(body, dict) or body.get("schema") != SCHEMA:
                return None
            closing = body["closing"]
            return cls(int(body["first"]), [(int(number), list(pods)) for number, pods in body["entries"]],
                       None if closing is None else Closing(closing["holder"], closing["acquireTime"],
                                                            closing["acquisitions"]))
        except (zlib.error, ValueError, KeyError, TypeError):
            return None
