"""Placement lock against a fake apiserver: another holder's lease expires on the
observer's own clock (never by comparing its renewTime with the local wall clock), a
holder renews while it holds, and a holder that lost the lease finds out on exit."""

import threading

import pytest

from distributetrain.core import errors, exitcodes
from distributetrain.core.clock import Clock, FakeClock, RealClock
from distributetrain.kube.connection import ApiTimeouts
from distributetrain.kube.lock import RENEWALS_PER_DURATION, PlacementLock
from distributetrain.manager.reporting.errorcodes import exit_code_of
from harness.apiserver import FakeApiServer, kube_at
from harness.waiting import WatchedClock, threads_end, wait_until

NAMESPACE = "default"
NAME = "distributetrain-placement"
TIMEOUTS = ApiTimeouts(connect_s=1.0, read_s=1.0, retry_deadline_s=1.0)
SHORT_LEASE_S = 3  # renewed every second
HELD_FOR_GOOD_S = 3600  # a holder's lease that neither needs renewing nor expires within a test


@pytest.fixture
def server():
    with FakeApiServer() as fake:
        yield fake


def lock(server, holder="ns/b", timeout_s=5.0, clock: Clock | None = None, **kwargs) -> PlacementLock:
    """On ``clock``; None: real time, for the tests of holders on other threads."""
    clock = clock or RealClock()
    return PlacementLock(kube_at(server.url, TIMEOUTS, clock), NAMESPACE, holder, timeout_s, NAME, clock, **kwargs)


def held_by(server, holder: str, renew_time: str, duration_s: int = 30) -> None:
    server.put_lease({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": NAME, "namespace": NAMESPACE},
                      "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration_s,
                               "acquireTime": renew_time, "renewTime": renew_time}})


def holder(server) -> str | None:
    return server.lease(NAMESPACE, NAME)["spec"].get("holderIdentity")


# A holder's renewTime as its node's clock wrote it: long ago, or in the future (skew).
@pytest.mark.parametrize("renew_time", ["2001-01-01T00:00:00.000000Z", "2099-01-01T00:00:00.000000Z"])
def test_another_holders_lease_expires_a_full_duration_after_this_process_first_saw_it(server, renew_time):
    held_by(server, "ns/a", renew_time)
    clock = FakeClock()
    contender = lock(server, clock=clock)
    assert not contender._try_acquire(server.lease(NAMESPACE, NAME))
    clock.advance(29.9)
    assert not contender._try_acquire(server.lease(NAMESPACE, NAME))
    clock.advance(0.2)
    assert contender._try_acquire(server.lease(NAMESPACE, NAME))
    assert holder(server) == "ns/b"


def test_any_change_to_the_lease_starts_the_observers_count_again(server):
    held_by(server, "ns/a", "2001-01-01T00:00:00.000000Z")
    clock = FakeClock()
    contender = lock(server, clock=clock)
    assert not contender._try_acquire(server.lease(NAMESPACE, NAME))
    clock.advance(20)
    held_by(server, "ns/a", "2001-01-01T00:00:00.000000Z")  # renewed (same times: a skewed or stuck clock)
    assert not contender._try_acquire(server.lease(NAMESPACE, NAME))
    clock.advance(29.9)
    assert not contender._try_acquire(server.lease(NAMESPACE, NAME))  # 49.9 s since first seen, but 29.9 s since the renewal was
    clock.advance(0.2)
    assert contender._try_acquire(server.lease(NAMESPACE, NAME))


def test_a_released_lease_is_taken_at_once(server):
    held_by(server, None, "2099-01-01T00:00:00.000000Z")
    assert lock(server, clock=FakeClock())._try_acquire(server.lease(NAMESPACE, NAME))


def renewals(server, of="ns/b") -> list[dict]:
    """The Lease writes of ``of``'s renewals (after the one that took it)."""
    return [w for w in server.lease_writes if w.get("holderIdentity") == of][1:]


def test_a_holder_is_renewed_while_it_holds_and_not_taken_over(server):
    """Two lease durations on both managers' clocks, a renewal's interval at a time, with
    another manager trying to take the Lease at each: without the renewals it would at
    the third."""
    interval_s = SHORT_LEASE_S / RENEWALS_PER_DURATION
    holder_clock, contender_clock = WatchedClock(), FakeClock()
    contender = lock(server, holder="ns/other", clock=contender_clock)
    with lock(server, duration_s=SHORT_LEASE_S, clock=holder_clock):
        for count in range(1, 2 * RENEWALS_PER_DURATION + 1):
            holder_clock.wait_for_waiters(1)  # the renewer waits out its interval
            holder_clock.advance(interval_s)
            contender_clock.advance(interval_s)
            assert not contender._try_acquire(server.lease(NAMESPACE, NAME))
            wait_until(lambda: len(renewals(server)) == count, server.changes, 5, f"renewal {count}")
        assert holder(server) == "ns/b"
    assert [w["renewTime"] for w in renewals(server)] == sorted(set(w["renewTime"] for w in renewals(server)))
    assert holder(server) is None  # released on exit


def test_the_renewer_stops_on_exit(server):
    clock = FakeClock()
    with lock(server, duration_s=SHORT_LEASE_S, clock=clock):
        pass
    assert [t for t in threading.enumerate() if t.name == "lease-renewer"] == []  # so no renewal after
    writes = len(server.lease_writes)
    clock.advance(SHORT_LEASE_S * 2 / 3)  # two renewal intervals
    assert len(server.lease_writes) == writes


def test_a_holder_whose_lease_was_taken_over_fails_on_exit_and_leaves_it(server):
    clock = WatchedClock()
    with pytest.raises(errors.LeaseLost) as failure:
        with lock(server, duration_s=SHORT_LEASE_S, clock=clock):
            held_by(server, "ns/other", "2001-01-01T00:00:00.000000Z")  # as an expired-lease takeover writes
            clock.wait_for_waiters(1)  # the renewer waits out its interval
            clock.advance(SHORT_LEASE_S / 2)  # past a renewal: the renewer reads it, and stops
            threads_end("lease-renewer")
    assert exit_code_of(failure.value) == exitcodes.API_ERROR
    assert "ns/other" in str(failure.value)
    assert holder(server) == "ns/other"


def test_the_sections_own_error_is_what_propagates_when_the_lease_was_also_lost(server):
    with pytest.raises(ValueError):
        with lock(server, duration_s=SHORT_LEASE_S):
            held_by(server, "ns/other", "2001-01-01T00:00:00.000000Z")
            raise ValueError("inventory failed")
    assert holder(server) == "ns/other"


def hold_lease(server, release: threading.Event, successor=lambda: None) -> threading.Thread:
    """Another manager takes the Lease and keeps it until ``release`` is set, then hands it
    to ``successor()``."""
    taken = threading.Event()

    def hold():
        with lock(server, holder="ns/a", duration_s=HELD_FOR_GOOD_S, successor=successor):
            taken.set()
            release.wait()

    holder_thread = threading.Thread(target=hold, daemon=True)
    holder_thread.start()
    assert taken.wait(5)
    return holder_thread


def lease_watches(server) -> int:
    return sum(1 for query in server.watch_requests if query.get("fieldSelector") == f"metadata.name={NAME}")


def test_a_contender_waits_on_a_watch_and_takes_the_lease_at_its_release(server):
    """No polling while the Lease is busy: one read, one watch, then the take at the
    release's event, however long the holder keeps it."""
    release = threading.Event()
    holder_thread = hold_lease(server, release)
    taken = threading.Event()
    contender = threading.Thread(target=lambda: (lock(server, timeout_s=60).__enter__(), taken.set()), daemon=True)
    contender.start()
    wait_until(lambda: lease_watches(server) == 1, server.changes, 5, "the contender watching the Lease")
    writes_before = len(server.lease_writes)
    assert not taken.is_set()
    release.set()
    assert taken.wait(5)
    holder_thread.join(5)
    assert lease_watches(server) == 1
    # The holder's release, then the contender's take: nothing in between.
    assert [w.get("holderIdentity") for w in server.lease_writes[writes_before:]] == [None, "ns/b"]


def test_a_release_hands_the_lease_to_the_successor_and_the_others_make_no_write(server):
    """The first of the queue takes the Lease at the release that names it; a contender
    behind it stays on its watch without a write: one update a hand-off, not one per
    contender. Each told once that the Lease is busy (it joins the queue then)."""
    release = threading.Event()
    holder_thread = hold_lease(server, release, successor=lambda: "ns/c")
    busy, locks, threads = [], {}, {}
    for contender in ("ns/b", "ns/c"):
        locks[contender] = lock(server, holder=contender, timeout_s=60, on_busy=lambda c=contender: busy.append(c))
        threads[contender] = threading.Thread(target=locks[contender].__enter__, daemon=True)
        threads[contender].start()
    wait_until(lambda: lease_watches(server) == 2, server.changes, 5, "both contenders watching the Lease")
    writes_before = len(server.lease_writes)
    release.set()
    threads["ns/c"].join(5)
    holder_thread.join(5)
    assert [w.get("holderIdentity") for w in server.lease_writes[writes_before:]] == ["ns/c", "ns/c"]
    assert threads["ns/b"].is_alive() and server.lease_conflicts == 0 and sorted(busy) == ["ns/b", "ns/c"]
    locks["ns/c"].__exit__(None, None, None)  # no successor: released, and the other contender takes it
    threads["ns/b"].join(5)
    locks["ns/b"].__exit__(None, None, None)
    assert holder(server) is None


def test_a_release_whose_successor_cannot_be_told_frees_the_lease(server):
    def unreadable() -> str:
        raise errors.TransientApiError("the queue could not be listed")

    release = threading.Event()
    holder_thread = hold_lease(server, release, successor=unreadable)
    writes_before = len(server.lease_writes)
    release.set()
    holder_thread.join(5)
    assert [w.get("holderIdentity") for w in server.lease_writes[writes_before:]] == [None]


def lease_of(holder: str | None) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": HELD_FOR_GOOD_S}}


def test_a_contender_that_loses_a_hand_off_goes_on_with_the_same_watch(server):
    """At a release every contender tries on the Lease the event carries; a loser goes on
    with its watch: one read and one watch for the whole wait, however many hand-offs pass
    (100 managers starting together, each re-reading and re-watching at every change,
    saturated the API server with new connections)."""
    server.put_lease(lease_of("ns/a"))
    taken = threading.Event()
    contender = threading.Thread(target=lambda: (lock(server, timeout_s=60).__enter__(), taken.set()), daemon=True)
    contender.start()
    wait_until(lambda: lease_watches(server) == 1, server.changes, 5, "the contender watching the Lease")
    for winner in ("ns/c", "ns/d"):  # released, and taken by another before the contender's try
        server.put_lease(lease_of(None), lease_of(winner))
    wait_until(lambda: server.lease_conflicts == 2, server.changes, 5, "the contender losing both hand-offs")
    assert not taken.is_set()
    server.put_lease(lease_of(None))
    assert taken.wait(5)
    assert holder(server) == "ns/b" and (server.lease_reads, lease_watches(server)) == (1, 1)


def contend_past_the_lock_timeout(server, wait_for_s: float) -> tuple[threading.Thread, list]:
    """A contender on a fake clock with a lock timeout of 0.2 s (standing for LOCK_TIMEOUT_S),
    whose job may wait ``wait_for_s``; the Lease is ``ns/a``'s for good. Returned once the
    contender watches the Lease, its clock past the lock timeout, and the holder renewed:
    the renewal wakes it to judge the Lease again, after the lock timeout. Its outcome
    (the holder it saw once it took the Lease, or the error) is the list's."""
    held_by(server, "ns/a", "2001-01-01T00:00:00.000000Z", duration_s=HELD_FOR_GOOD_S)
    clock, outcome = FakeClock(), []

    def contend() -> None:
        try:
            with lock(server, timeout_s=0.2, clock=clock, wait_until=clock.monotonic() + wait_for_s):
                outcome.append(holder(server))
        except errors.LeaseBusy as busy:
            outcome.append(busy)

    contender = threading.Thread(target=contend, daemon=True)
    contender.start()
    wait_until(lambda: lease_watches(server) == 1, server.changes, 5, "the contender watching the Lease")
    clock.advance(1.0)
    held_by(server, "ns/a", "2001-01-01T00:00:01.000000Z", duration_s=HELD_FOR_GOOD_S)  # renewed
    return contender, outcome


def test_a_lease_busy_past_the_lock_timeout_is_tried_for_as_long_as_the_job_may_wait(server):
    contender, outcome = contend_past_the_lock_timeout(server, wait_for_s=60)
    # Still busy past the lock timeout: the contender watches again ...
    wait_until(lambda: lease_watches(server) == 2 or outcome, server.changes, 5, "the contender watching again")
    assert outcome == []
    held_by(server, "", "2001-01-01T00:00:02.000000Z")  # ... and takes the Lease at its release
    contender.join(5)
    assert outcome == ["ns/b"]


def test_without_a_longer_wait_a_busy_lease_fails_at_the_lock_timeout(server):
    contender, outcome = contend_past_the_lock_timeout(server, wait_for_s=0.1)
    contender.join(5)
    [failure] = outcome
    assert isinstance(failure, errors.LeaseBusy) and exit_code_of(failure) == exitcodes.TIMED_OUT
    assert lease_watches(server) == 1
