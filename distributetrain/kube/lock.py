"""Serialise inventory + plan + create across managers with a coordination Lease.

Two managers started at the same moment would otherwise both see the same free GPUs.
Every manager uses the same Lease by default (``settings.DEFAULT_LOCK_NAMESPACE``),
whatever its job's namespace, because GPUs are a cluster-wide resource.

- Taking it: a create, or an update carrying the resourceVersion just read, so exactly
  one contender wins each round. A busy Lease is watched, not polled: a contender tries
  again at the change that frees it (a release, or the holder's lease judged expired),
  so the Lease passes from one manager to the next in one watch event, however many
  wait. A contender tries on the object the event carries, and goes on with the same
  watch when another won: a hand-off costs each contender one update, never a read or
  a new connection (100 managers starting together re-read the Lease and reconnected a
  watch at each of its changes, hundreds of TLS handshakes a turn, which saturated the
  API server). A holder that knows who waits next (``successor``) hands the Lease to it
  as it lets it go: the release names it the holder, and it takes the Lease by the usual
  update at that event while the others, seeing it held, stay put. So a hand-off costs
  one update, not one per contender: 100 contenders each trying at every release were
  thousands of conflicting writes for 100 turns, the turn's main cost on a small server.
  ``on_busy`` is told once when the Lease is found busy (a contender joins the queue the
  successor is chosen from). It is waited for for ``LOCK_TIMEOUT_S``, or for as long as the job may still
  wait for GPUs (``--wait-for-gpus``) if that is longer: a manager allowed to wait an
  hour must not fail because others planned meanwhile.
- Holding it: a daemon thread renews it every third of its duration while the
  critical section runs (a large cluster's inventory plus the creates can outlast it).
- Judging another holder's lease expired: as client-go's leader election does, on this
  process's own monotonic clock. The lease counts as held until ``leaseDurationSeconds``
  have passed since this process first saw its current version; the holder's
  ``renewTime`` is never compared with the local clock, since nodes' clocks disagree.
- Losing it: another manager can take it only by writing its own identity and
  acquireTime. So reading the Lease back on exit, still naming this acquisition, proves
  the section was exclusive, and then it is released. When it names another (or is gone),
  or cannot be read and the last renewal is too old to be sure, leaving the section
  raises ``LeaseLost`` (exit 76): the caller's plan may have raced another manager's,
  so the job fails and tears down rather than run on it. A renewal that reads another
  holder stops renewing and makes the exit raise the same way.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections.abc import Callable

from distributetrain.core import errors
from distributetrain.core.clock import Clock
from distributetrain.kube.client import Kube
from distributetrain.kube.events import micro_time
from distributetrain.kube.connection import ApiTimeouts, make_api_client

log = logging.getLogger(__name__)

# How long a busy Lease is tried at least before the job fails (exit 75). Holders keep it
# seconds (a large cluster's inventory: up to 17 s at 150,000 pods), so this is many
# managers' turns; a dead holder's Lease is taken after LEASE_DURATION_S.
LOCK_TIMEOUT_S = 120.0
LEASE_DURATION_S = 30  # a dead holder blocks every other manager this long at most
RENEWALS_PER_DURATION = 3  # renew every third of the duration: two renewals may fail in a row
# Renewals have short timeouts of their own, so a dead connection costs one renewal,
# not the lease: a renewal (a read, then a write) gives up within twice its retry
# deadline plus one request's timeouts, 15 s by default.
RENEW_CONNECT_S = 2.0
RENEW_READ_S = 3.0
RENEW_RETRY_SHARE = 1 / 4  # of the interval: each call's retry deadline
# Without a renewal for this share of the duration, a release that fails cannot prove
# the section was exclusive: the rest is slack for the observers' clock rates and delays.
SURE_WITHOUT_RENEWAL_SHARE = 2 / 3
RETRY_MIN_S = 0.05  # after losing the race to create the Lease: read what the winner wrote
# One watch of a busy Lease lasts this long at most: a change ends it at once, and a
# holder's lease judged expired before it ends the wait at that moment.
LEASE_WATCH_S = 30.0


class PlacementLock:
    """Context manager: ``with PlacementLock(kube, ns, holder, timeout_s, name): ...``

    A busy Lease is tried for ``timeout_s``, or until ``wait_until`` (of ``clock``: the end
    of the job's wait for GPUs) if that is later. Every wait (retries, renewals) and every
    judgement of a lease's age reads ``clock``; ``duration_s`` is for tests.
    """

    def __init__(self, kube: Kube, namespace: str, holder: str, timeout_s: float, name: str, clock: Clock,
                 duration_s: float = LEASE_DURATION_S, wait_until: float = -math.inf,
                 on_busy: Callable[[], None] = lambda: None, successor: Callable[[], str | None] = lambda: None):
        self.kube = kube
        self.namespace = namespace
        self.holder = holder
        self.timeout_s = timeout_s
        self.wait_until = wait_until
        self.name = name
        self.duration_s = duration_s
        self.clock = clock
        self.on_busy = on_busy  # told once, when the Lease is first found busy
        self.successor = successor  # who the release hands the Lease to (None: no one)
        self._observed_version = ""  # resourceVersion of the Lease when this process last saw it change
        self._observed_at = 0.0  # clock.monotonic() at that moment
        self._acquire_time = ""  # spec.acquireTime this holder wrote: names this acquisition
        self._renewed_at = 0.0  # clock.monotonic() just before the last successful write was sent
        self._lost = ""  # why the renewer knows the lease was taken over
        self._stopping = threading.Condition()  # notified when the section ends
        self._stopped = False
        self._renewer: threading.Thread | None = None
        self._written: dict = {}  # the Lease as this holder last wrote it (its resourceVersion)
        self.found: dict | None = None  # the Lease's spec as this holder found it, before taking it
        self._release_spec: dict | None = None  # what the release writes, once ``release_spec`` decided it

    @property
    def where(self) -> str:
        return f"[{self.namespace}/{self.name}]"

    def __enter__(self) -> "PlacementLock":
        started = self.clock.monotonic()
        give_up_at = max(started + self.timeout_s, self.wait_until)
        lease = self.kube.read("Lease", self.namespace, self.name)
        told_busy = False
        while not self._try_acquire(lease):
            if not told_busy:
                self.on_busy()
                told_busy = True
            if self.clock.monotonic() >= give_up_at:
                raise errors.LeaseBusy(
                    f"could not take the placement lock Lease {self.where} within {give_up_at - started:.0f}s")
            if self._try_at_each_change(lease, give_up_at):
                break
            lease = self.kube.read("Lease", self.namespace, self.name)
        log.info("took placement lock %s", self.where)
        self._renewer = threading.Thread(target=self._renew_until_stopped, name="lease-renewer", daemon=True)
        self._renewer.start()
        return self

    def _try_at_each_change(self, lease: dict | None, give_up_at: float) -> bool:
        """Whether the Lease was taken at one of its changes (released, taken, renewed,
        deleted), watched until its holder's lease would count as expired, or
        ``give_up_at``, whichever comes first: a watch of the one object, so a release
        wakes every contender at once and nothing polls meanwhile."""
        if lease is None:  # another contender created it first: read what it wrote
            self.clock.sleep(random.uniform(RETRY_MIN_S / 2, RETRY_MIN_S))
            return False
        duration = (lease.get("spec") or {}).get("leaseDurationSeconds") or LEASE_DURATION_S
        expires_at = self._observed_at + duration
        wait_s = min(expires_at, give_up_at) - self.clock.monotonic()
        if wait_s <= 0:
            return False
        version = lease["metadata"].get("resourceVersion", "")
        for event_type, changed in self.kube.watch("Lease", self.namespace, version, min(wait_s, LEASE_WATCH_S),
                                                   field_selector=f"metadata.name={self.name}"):
            if event_type == "BOOKMARK":
                continue  # a resourceVersion, not the Lease
            if self._try_acquire(None if event_type == "DELETED" else changed):
                return True
        return False

    def _spec(self, found: dict | None) -> dict:
        """This acquisition's: its identity, its acquire time (which names it), and the count
        of acquisitions one more than the Lease had (``bookingjournal.Closing``)."""
        now = micro_time(self.clock.now())
        transitions = ((found or {}).get("spec") or {}).get("leaseTransitions") or 0
        return {"holderIdentity": self.holder, "leaseDurationSeconds": round(self.duration_s),
                "acquireTime": now, "renewTime": now, "leaseTransitions": transitions + 1}

    def _held_by_another(self, lease: dict) -> bool:
        """Whether another holder's lease still counts, judged on this process's clock."""
        spec = lease.get("spec") or {}
        version = lease["metadata"].get("resourceVersion", "")
        if version != self._observed_version:
            self._observed_version, self._observed_at = version, self.clock.monotonic()
        if not spec.get("holderIdentity") or spec["holderIdentity"] == self.holder:
            return False  # released, handed to this job, or this job's own (a restarted manager)
        duration = spec.get("leaseDurationSeconds") or LEASE_DURATION_S
        return self.clock.monotonic() - self._observed_at < duration

    def _try_acquire(self, lease: dict | None) -> bool:
        """Take the Lease as ``lease`` (just read; None: there is none) shows it."""
        if lease is not None and self._held_by_another(lease):
            return False
        spec = self._spec(lease)
        sent_at = self.clock.monotonic()
        try:
            if lease is None:
                written = self.kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                                  "metadata": {"name": self.name, "namespace": self.namespace},
                                                  "spec": spec})
            else:
                written = self.kube.update({**lease, "spec": spec})
        except (errors.AlreadyExists, errors.Conflict):
            return False  # another manager won this round
        self._acquire_time, self._renewed_at = spec["acquireTime"], sent_at
        self._written = written
        self.found = None if lease is None else lease.get("spec")
        return True

    def _ours(self, lease: dict | None) -> bool:
        """Still this acquisition's: another manager's takeover would have replaced the spec."""
        spec = (lease or {}).get("spec") or {}
        return spec.get("holderIdentity") == self.holder and spec.get("acquireTime") == self._acquire_time

    def _renew_until_stopped(self) -> None:
        interval_s = self.duration_s / RENEWALS_PER_DURATION
        renewals: Kube | None = None  # made at the first renewal: most sections end before it
        while not self._stopped_within(interval_s):
            if renewals is None:
                timeouts = ApiTimeouts(connect_s=RENEW_CONNECT_S, read_s=RENEW_READ_S,
                                       retry_deadline_s=interval_s * RENEW_RETRY_SHARE)
                # A client of its own: the renewal's timeouts apply to every request it makes.
                renewals = Kube(make_api_client(self.kube.api_client.configuration, timeouts), self.clock, timeouts)
            # Read, then write: ownership is judged on what the Lease says, never on a
            # write's error (a retried write whose first attempt landed conflicts too).
            sent_at = self.clock.monotonic()
            try:
                lease = renewals.read("Lease", self.namespace, self.name)
                if not self._ours(lease):
                    self._lost = f"it now reads {(lease or {}).get('spec')}"
                    log.error("lost placement lock %s: %s", self.where, self._lost)
                    return
                lease["spec"]["renewTime"] = micro_time(self.clock.now())
                self._written = renewals.update(lease)
            except errors.DistributeTrainError as e:
                log.warning("could not renew placement lock %s (next try in %.0fs): %s", self.where, interval_s, e)
                continue
            self._renewed_at = sent_at
            log.info("renewed placement lock %s", self.where)

    def _stopped_within(self, seconds: float) -> bool:
        """Whether the section ended, waiting for it at most ``seconds`` of the clock."""
        ends_at = self.clock.monotonic() + seconds
        with self._stopping:
            while not self._stopped and (left := ends_at - self.clock.monotonic()) > 0:
                self.clock.wait(self._stopping, left)
            return self._stopped

    def __exit__(self, exc_type, exc, tb) -> None:
        with self._stopping:
            self._stopped = True
            self._stopping.notify_all()
        self._renewer.join()
        lost = self._lost or self._release()
        if not lost:
            return
        message = f"the placement lock Lease {self.where} may have been held by another manager meanwhile: {lost}"
        if exc_type is not None:
            log.error("%s", message)  # the section's own failure is what the job reports
            return
        raise errors.LeaseLost(message)

    def _release(self) -> str:
        """Why the section may not have been exclusive ("" if it was), releasing the Lease,
        to the successor if there is one.

        The release is an update of the Lease as this holder last wrote it: it succeeds
        only if no one wrote it since, which proves the section exclusive in one request.
        A conflict reads it back to see whose it is now."""
        lease = self._written
        spec = self.release_spec()
        successor = spec["holderIdentity"]
        try:
            self.kube.update({**lease, "spec": spec})
        except errors.Conflict:
            return self._read_back()
        except errors.DistributeTrainError as e:
            unrenewed_s = self.clock.monotonic() - self._renewed_at
            if unrenewed_s > self.duration_s * SURE_WITHOUT_RENEWAL_SHARE:
                return f"neither renewed for {unrenewed_s:.0f}s nor released ({e})"
            log.warning("could not release placement lock %s (it expires by itself): %s", self.where, e)
            return ""
        log.info("released placement lock %s%s", self.where, f" to {successor}" if successor else "")
        return ""

    def release_spec(self) -> dict:
        """The spec the release will write, decided at the first call (the successor asked
        then): to the successor, or to no one, with an acquire time of its own and this
        acquisition's count, so no other holder's write leaves the Lease the same
        (``bookingjournal.Closing``: any acquisition since counts one more, or, by a
        release that does not count them, none)."""
        if self._release_spec is None:
            now = micro_time(self.clock.now())
            written = self._written["spec"]
            self._release_spec = {"holderIdentity": self._successor(), "acquireTime": now,
                                  "leaseDurationSeconds": written["leaseDurationSeconds"],
                                  "leaseTransitions": written.get("leaseTransitions")}
            if self._release_spec["holderIdentity"]:
                self._release_spec["renewTime"] = now
        return self._release_spec

    def _successor(self) -> str | None:
        """Who waits next; None if no one, or if it cannot be told (the release frees the
        Lease then, and every contender tries, as without a queue)."""
        try:
            return self.successor()
        except errors.DistributeTrainError as e:
            log.warning("could not tell who waits next for placement lock %s: %s", self.where, e)
            return None

    def _read_back(self) -> str:
        """After a release that conflicted: "" if the Lease is still this acquisition's
        (a renewal whose answer was lost wrote it), else why it is not; released either way."""
        try:
            lease = self.kube.read("Lease", self.namespace, self.name)
        except errors.DistributeTrainError as e:
            return f"it changed and could not be read back ({e})"
        if not self._ours(lease):
            return f"it now reads {(lease or {}).get('spec')}"
        self._written = lease
        return self._release()
