"""``--max-restarts``: whether a lost attempt is started again, and what comes between.

An attempt is lost when one of its pods is lost for a reason outside the training
script (``errors.PodLost``): while its workers start (pre-training) or while it trains
(post-training). The budget lives on the manager pod (``Reporter.restarts``), so a
restarted manager container neither resets nor double-counts it.
"""

from __future__ import annotations

import time

from distributetrain import errors
from distributetrain.kube import Kube
from distributetrain.reporting import Reporter
from distributetrain.settings import JobSettings
from distributetrain.teardown import tear_down

RESTART_BACKOFF_S = 2.0  # before the first restart; doubled for each one after it
RESTART_BACKOFF_MAX_S = 60.0


def next_attempt(kube: Kube, settings: JobSettings, reporter: Reporter, deadline: float,
                 lost: errors.PodLost) -> JobSettings | None:
    """The next attempt's settings, once the lost attempt is torn down and the backoff
    waited; None when the budget or the deadline allows no restart."""
    used = reporter.restarts()
    if used >= settings.max_restarts:
        return None
    backoff_s = min(RESTART_BACKOFF_S * 2 ** used, RESTART_BACKOFF_MAX_S)
    if time.monotonic() + backoff_s >= deadline:
        return None
    tear_down(kube, settings, keep_chief=False)
    # Recorded after the teardown: a manager restarted in between finds the lost
    # attempt again and counts this restart once.
    settings = settings.replace(attempt=settings.attempt + 1)
    reporter.restarting(used + 1, settings.max_restarts, lost.cause, settings.attempt, backoff_s)
    time.sleep(backoff_s)
    return settings
