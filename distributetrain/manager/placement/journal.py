"""The booking journal (``core.placement.bookingjournal``) in its ConfigMap, beside the
placement Lease: a survey reads its position, a holder of the Lease reads it, and
writes it with its own entry before it lets the Lease go.

Whoever can write that ConfigMap can hide bookings from the managers that trust it: it is
the same account's, in the same namespace, as the placement Lease, whose holder can book
anything (``rbac/``). A journal that cannot be read or written (an older ``rbac/`` without
it, an API server that fails the request) costs nothing but the journal: the holder lists
the bookings under the Lease, and one that wrote no entry leaves the journal broken for
the next (``bookingjournal``), which lists them too.
"""

from __future__ import annotations

import base64
import logging

from distributetrain.core import errors, names
from distributetrain.core.placement import bookingjournal
from distributetrain.core.placement.bookingjournal import BookingJournal
from distributetrain.kube.client import Kube

log = logging.getLogger(__name__)

JOURNAL_NAME = f"{names.APP}-booking-journal"
DATA_KEY = "journal.json.zlib"
def read(kube: Kube, namespace: str) -> tuple[BookingJournal | None, str | None]:
    """The journal (None if there is none, or not of this release's form) and its
    ConfigMap's resourceVersion ("" if there is none; None if it may not be read)."""
    try:
        config_map = kube.read("ConfigMap", namespace, JOURNAL_NAME)
    except errors.DistributeTrainError as e:
        log.warning("cannot read the booking journal [%s/%s] (%s): the bookings are listed", namespace,
                    JOURNAL_NAME, e)
        return None, None
    if config_map is None:
        return None, ""
    data = (config_map.get("binaryData") or {}).get(DATA_KEY)
    return (BookingJournal.decode(base64.b64decode(data)) if data else None,
            config_map["metadata"].get("resourceVersion", ""))


def position(kube: Kube, namespace: str) -> int | None:
    """Where a survey begun now starts in the journal (None: no journal to use). With none
    yet, one is begun if no manager is in its turn (``bookingjournal.opening``): the first
    burst of managers then trusts it from its first turn."""
    journal, version = read(kube, namespace)
    if journal is not None:
        return journal.next
    if version is None:
        return None  # it may not be read
    try:
        lease = kube.read("Lease", namespace, names.LOCK_LEASE_NAME)
    except errors.DistributeTrainError as e:
        log.warning("cannot read the placement Lease [%s/%s] (%s): no booking journal begun", namespace,
                    names.LOCK_LEASE_NAME, e)
        return None
    closing = bookingjournal.opening((lease or {}).get("spec"), lease is not None)
    if closing is None:
        return None
    begun = BookingJournal(closing=closing)
    return begun.next if write(kube, namespace, begun, version) else None


def write(kube: Kube, namespace: str, journal: BookingJournal, version: str) -> bool:
    """``journal`` in place of the one read at ``version`` ("": none yet); whether it was
    written. A conflict (a holder whose Lease was taken over meanwhile, a journal begun by
    another), a refusal or a failure leaves the one there, or this one (a write whose
    answer was lost): either closing is right, as the next holder reads it."""
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": JOURNAL_NAME, "namespace": namespace, "labels": {names.LABEL_APP: names.APP},
                               **({"resourceVersion": version} if version else {})},
                  "binaryData": {DATA_KEY: base64.b64encode(journal.encode()).decode()}}
    try:
        kube.update(config_map) if version else kube.create(config_map)
    except errors.DistributeTrainError as e:
        log.warning("could not write the booking journal [%s/%s] (%s): the next booking lists the bookings",
                    namespace, JOURNAL_NAME, e)
        return False
    return True
