"""Serialise inventory + plan + create across managers with a coordination Lease.

Two managers started at the same moment would otherwise both see the same free GPUs.
The Lease is held only for that critical section (about a second); a holder that died
is taken over once its lease has not been renewed for ``LEASE_DURATION_S``. Updates
carry the resourceVersion, so exactly one contender wins each round.
"""

from __future__ import annotations

import logging
import random
import time
from datetime import datetime, timedelta, timezone

from distributetrain import errors, exitcodes
from distributetrain.kube import Kube

log = logging.getLogger(__name__)

LEASE_DURATION_S = 30  # longer than any critical section; a dead holder blocks this long at most
RETRY_MIN_S = 0.05
RETRY_MAX_S = 0.5


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _format(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str) -> datetime:
    return datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")


def _expired(spec: dict, now: datetime) -> bool:
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    if not spec.get("holderIdentity") or not renewed:
        return True
    duration = timedelta(seconds=spec.get("leaseDurationSeconds") or LEASE_DURATION_S)
    return _parse(renewed) + duration < now


class PlacementLock:
    """Context manager: ``with PlacementLock(kube, ns, holder, deadline): ...``"""

    def __init__(self, kube: Kube, namespace: str, holder: str, timeout_s: float, name: str):
        self.kube = kube
        self.namespace = namespace
        self.holder = holder
        self.timeout_s = timeout_s
        self.name = name
        self._held: dict | None = None

    def __enter__(self) -> "PlacementLock":
        give_up_at = time.monotonic() + self.timeout_s
        delay = RETRY_MIN_S
        while not self._try_acquire():
            if time.monotonic() > give_up_at:
                raise errors.JobFailed(
                    f"could not take the placement lock Lease [{self.namespace}/{self.name}] within "
                    f"{self.timeout_s:.0f}s",
                    exitcodes.TIMED_OUT,
                )
            time.sleep(random.uniform(delay / 2, delay))
            delay = min(delay * 2, RETRY_MAX_S)
        log.info("took placement lock [%s/%s]", self.namespace, self.name)
        return self

    def _try_acquire(self) -> bool:
        now = _now()
        spec = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": LEASE_DURATION_S,
            "acquireTime": _format(now),
            "renewTime": _format(now),
        }
        lease = self.kube.get_lease(self.namespace, self.name)
        try:
            if lease is None:
                self._held = self.kube.create_lease(
                    {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
                )
                return True
            current = lease.get("spec") or {}
            if current.get("holderIdentity") != self.holder and not _expired(current, now):
                return False
            lease["spec"] = spec
            self._held = self.kube.replace_lease(lease)
            return True
        except (errors.AlreadyExists, errors.Conflict):
            return False  # another manager won this round

    def __exit__(self, *exc) -> None:
        if self._held is None:
            return
        lease, self._held = self._held, None
        lease["spec"] = {"holderIdentity": None, "leaseDurationSeconds": LEASE_DURATION_S}
        try:
            self.kube.replace_lease(lease)
            log.info("released placement lock [%s/%s]", self.namespace, self.name)
        except errors.DistributeTrainError as e:
            # Not fatal: the lease expires by itself after LEASE_DURATION_S.
            log.warning("could not release placement lock [%s/%s]: %s", self.namespace, self.name, e)
