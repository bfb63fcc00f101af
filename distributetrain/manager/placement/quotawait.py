"""A ResourceQuota full for now: the job waits for its used figures to change.

With ``--wait-for-gpus``, a quota's refusal for what the namespace uses now ("exceeded
quota", ``errors.QuotaFull``) is no end: the job loop releases what the attempt created,
and this waits, within the same deadline, on the quota through one informer (a list,
then a watch) until what it uses changes from what the refusal saw and the job may fit
beside it (``quotas.shortfalls``), or the quota is gone; then the loop tries again. A
quota whose hard limit can never hold the job is bad input before this (``quotacheck``).

Watching quotas is the Role's optional ``resourcequotas: list, watch``: without it the
job tries again after a backoff, doubling up to ``RETRY_MAX_S``, never past the deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from distributetrain.core import errors, quantity
from distributetrain.core.placement import quotas
from distributetrain.core.clock import Clock
from distributetrain.core.settings import JobSettings
from distributetrain.kube.client import KubeApi
from distributetrain.kube.informer import Informer, Satisfied
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.reporting.reporting import Reporter

log = logging.getLogger(__name__)

RETRY_FIRST_S = 5.0  # without the right to watch quotas: the first retry's delay
RETRY_MAX_S = 60.0


@dataclass(frozen=True)
class TryAgain:
    """The quota's used figures changed and the job may fit, it is gone, or (without the
    right to watch it) the backoff passed: try again."""

    why: str  # e.g. "requests.nvidia.com/gpu used 2"


@dataclass(frozen=True)
class StillFull:
    """The deadline came first."""


def used_changed(quota: Mapping, before: Mapping[str, str]) -> bool:
    """Whether any figure of ``before`` differs in the quota's ``status.used`` now."""
    used = (quota.get("status") or {}).get("used") or {}
    return not all(quantity.same(used.get(key, "0"), value) for key, value in before.items())


class QuotaWait:
    """Waits of one job for its namespace's quotas; holds the backoff of its retries without RBAC."""

    def __init__(self, kube: KubeApi, settings: JobSettings, reporter: Reporter, clock: Clock):
        self.kube = kube
        self.settings = settings
        self.reporter = reporter
        self.clock = clock
        self.retry_s = RETRY_FIRST_S

    def wait(self, full: errors.QuotaFull, until: float) -> TryAgain | StillFull:
        """Until ``full.quota`` may hold the job (TryAgain) or ``until`` (monotonic; StillFull)."""
        try:
            return self._follow(full, until)
        except errors.Forbidden as e:  # the list or the watch
            return self._retry_later(full, until, e)

    def _follow(self, full: errors.QuotaFull, until: float) -> TryAgain | StillFull:
        informer = Informer(self.kube, "ResourceQuota", self.settings.namespace, clock=self.clock)
        first = informer.wait_until(lambda store: dict(store), until)
        quota = first.value.get(full.quota) if isinstance(first, Satisfied) else None
        before = quotas.used_at_refusal(full.message) or ((quota or {}).get("status") or {}).get("used") or {}
        self._say(full.quota, quotas.shortfalls(quota, self.settings) if quota else [])
        outcome = informer.wait_until(lambda store: self._room(store.get(full.quota), before), until)
        if isinstance(outcome, Satisfied):
            log.info("job %s: ResourceQuota %s changed (%s); trying again", self.settings.job_name, full.quota,
                     outcome.value.why)
            return outcome.value
        return StillFull()

    def _room(self, quota: Mapping | None, before: Mapping[str, str]) -> TryAgain | None:
        if quota is None:
            return TryAgain("it was deleted")
        if not used_changed(quota, before) or quotas.shortfalls(quota, self.settings):
            return None
        used = (quota.get("status") or {}).get("used") or {}
        return TryAgain(", ".join(f"{key} used {used.get(key, '0')}" for key in sorted(before)))

    def _say(self, quota: str, missing: list[str]) -> None:
        settings = self.settings
        why = "; ".join(missing) or "it refuses the job's pods"
        # The same words while the same shortfall lasts: one Event, its count going up.
        note = (f"waiting for quota {quota} in {settings.namespace}: {why} "
                f"(--wait-for-gpus {settings.wait_for_gpus_s:.0f}s)")
        log.info("job %s: %s", settings.job_name, note)
        self.reporter.phase("WaitingForQuota")
        self.reporter.events.record(jobevents.WAITING_FOR_QUOTA, note)

    def _retry_later(self, full: errors.QuotaFull, until: float, denied: errors.Forbidden) -> TryAgain | StillFull:
        """Without the right to list and watch quotas: try again after a backoff, within ``until``."""
        pause = min(self.retry_s, until - self.clock.monotonic())
        if pause <= 0:
            return StillFull()
        log.warning("job %s: cannot watch ResourceQuotas (%s; rbac/role.yaml grants resourcequotas list, watch); "
                    "trying again in %.0fs", self.settings.job_name, denied, pause)
        self._say(full.quota, [])
        self.clock.sleep(pause)
        self.retry_s = min(self.retry_s * 2, RETRY_MAX_S)
        return TryAgain(f"{pause:.0f}s passed")
