"""The booking journal (core/placement/bookingjournal.py): what a survey at some position
may take from it, and when a holder may trust it at all."""

import hashlib
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from distributetrain.core.placement import bookingjournal
from distributetrain.core.placement.bookingjournal import BookingJournal, Closing

RELEASED = {"holderIdentity": None, "acquireTime": "2026-11-30T10:00:00.000001Z", "leaseTransitions": 3}
HANDED_ON = {"holderIdentity": "ns/j2", "acquireTime": "2026-11-30T10:00:00.000002Z", "leaseTransitions": 4}


def pod(name: str) -> dict:
    uid = hashlib.sha256(name.encode()).hexdigest()  # as little alike as the server's
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid}, "spec": {"nodeName": "a"}}


# Each step: a holder's entry of some pods, and whether it found the journal unbroken.
STEPS = st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=12)
FEW_PODS = 5  # kept in the drawn journals: the oldest entries go in most of them


def written(steps) -> tuple[BookingJournal, list[tuple[int, list[dict], bool]]]:
    journal, history = BookingJournal(), []
    for index, (count, unbroken) in enumerate(steps):
        pods = [pod(f"p{index}-{i}") for i in range(count)]
        history.append((journal.next, pods, unbroken))
        journal = journal.appended(pods, Closing.of(RELEASED), unbroken)
    return journal, history


@given(STEPS, st.integers(0, 14))
def test_a_covered_survey_gets_every_pod_entered_since_its_position_and_no_other(steps, position):
    with mock.patch.object(bookingjournal, "MAX_PODS", FEW_PODS):
        journal, history = written(steps)
    numbers = [number for number, _, _ in history]
    assert numbers == list(range(len(history)))  # one number an entry, in order
    if not journal.covers(position):
        return
    # Covered: no holder since the position found the journal broken, and every entry from it is there.
    assert all(unbroken for number, _, unbroken in history if number >= position)
    entered = [p["metadata"]["name"] for number, pods, _ in history if number >= position for p in pods]
    assert [p["metadata"]["name"] for p in journal.since(position)] == entered


@given(STEPS)
def test_a_holder_that_found_it_broken_starts_it_over_after_its_own_entry(steps):
    journal, history = written([*steps, (2, False)])
    assert journal.first == journal.next == len(history)
    assert journal.entries == []
    assert not journal.covers(len(history) - 1)  # a survey from before: its bookings may be anywhere


@given(st.lists(st.integers(0, FEW_PODS + 2), max_size=12))
def test_it_keeps_the_newest_entries_whole_up_to_max_pods(counts):
    with mock.patch.object(bookingjournal, "MAX_PODS", FEW_PODS):
        journal, history = written([(count, True) for count in counts])
    assert sum(len(pods) for _, pods in journal.entries) <= FEW_PODS
    # The newest entries, whole, none missing between them; the first it keeps is where it begins.
    assert [number for number, _ in journal.entries] == list(range(journal.first, journal.next))
    assert journal.next == len(history)
    # No more dropped than the cap asks: the newest entry dropped would not have fit beside them.
    if journal.first > 0 and journal.entries:
        _, newest_dropped, _ = history[journal.first - 1]
        assert sum(len(pods) for _, pods in journal.entries) + len(newest_dropped) > FEW_PODS


def test_a_journal_beyond_a_configmap_is_written_as_begun_after_its_last_entry(monkeypatch):
    monkeypatch.setattr(bookingjournal, "MAX_ENCODED_BYTES", 600)
    journal = BookingJournal(closing=Closing.of(RELEASED))
    for index in range(40):
        journal = journal.appended([pod(f"p{index}")], Closing.of(RELEASED), unbroken=True)
    encoded = journal.encode()
    assert len(encoded) <= 600
    read = BookingJournal.decode(encoded)
    assert (read.first, read.next, read.entries, read.closing) == (40, 40, [], Closing.of(RELEASED))
    assert read.unbroken(RELEASED)  # the chain goes on: surveys from now on trust it
    assert not read.covers(39) and read.covers(40)


def test_unbroken_only_if_the_lease_is_as_the_last_writer_released_it():
    journal = BookingJournal(closing=Closing.of(HANDED_ON))
    assert journal.unbroken(dict(HANDED_ON))
    assert journal.unbroken({**HANDED_ON, "renewTime": "2026-11-30T10:00:05.000000Z"})  # renewed by its successor
    # Taken meanwhile by one that kept no journal: another acquisition counted, another time;
    # or by an older release, which counts none.
    assert not journal.unbroken({**HANDED_ON, "leaseTransitions": 5})
    assert not journal.unbroken({**HANDED_ON, "acquireTime": "2026-11-30T10:00:09.000000Z"})
    assert not journal.unbroken({"holderIdentity": None, "leaseDurationSeconds": 30})
    assert not journal.unbroken(None)  # created anew
    assert not BookingJournal().unbroken(HANDED_ON)  # no journal yet


@given(STEPS)
def test_it_reads_back_as_written(steps):
    journal, _ = written(steps)
    assert BookingJournal.decode(journal.encode()) == journal
    assert BookingJournal.decode(b"not zlib") is None


def test_a_journal_is_begun_only_where_no_manager_is_in_its_turn():
    assert bookingjournal.opening(None, lease_exists=False) == bookingjournal.NO_LEASE
    assert bookingjournal.opening(RELEASED, lease_exists=True) == Closing.of(RELEASED)
    assert bookingjournal.opening(HANDED_ON, lease_exists=True) is None  # its successor's turn comes
    assert bookingjournal.opening({**HANDED_ON, "holderIdentity": "ns/j1"}, lease_exists=True) is None  # held
    # Let go by an older release: another of its turns would leave the Lease the same.
    assert bookingjournal.opening({"holderIdentity": None, "leaseDurationSeconds": 30}, lease_exists=True) is None
    # The first holder creates the Lease: it finds none, as the journal begun says.
    assert BookingJournal(closing=bookingjournal.NO_LEASE).unbroken(None)
    assert not BookingJournal(closing=bookingjournal.NO_LEASE).unbroken({"holderIdentity": None})
