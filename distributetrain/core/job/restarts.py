"""``--max-restarts``: whether a lost attempt is started again, and after how long.

An attempt is lost when one of its pods is lost for a reason outside the training
script (``errors.AttemptLost``): while it starts or while it trains. The budget lives on the
manager pod (the job's ``record``), so a restarted manager container neither resets
nor double-counts it. A pure rule: the job loop (``job``) does what it says.
"""

from __future__ import annotations

RESTART_BACKOFF_S = 2.0  # before the first restart; doubled for each one after it
RESTART_BACKOFF_MAX_S = 60.0


def restart_backoff(used: int, max_restarts: int, seconds_left: float) -> float | None:
    """The wait before the next attempt, or None when the budget (``used`` of
    ``max_restarts``) or the job's deadline (``seconds_left``) allows no restart."""
    if used >= max_restarts:
        return None
    backoff_s = min(RESTART_BACKOFF_S * 2 ** used, RESTART_BACKOFF_MAX_S)
    return backoff_s if backoff_s < seconds_left else None
