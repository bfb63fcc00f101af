"""A queued job's place in its Kueue queue while it waits, for ``status`` and ``list``.

Kueue tells positions only through its visibility API (the pending workloads of a
LocalQueue), an aggregated API a cluster may not serve, or may not let the manager read
(``rbac/kueue/role.yaml``). So a position is news, never a condition of the job: the first
"not served" or "forbidden" ends the polling with one log line, and a failed read is
skipped until the next poll.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping

from distributetrain.core import errors
from distributetrain.core.clock import Clock
from distributetrain.kube.client import KubeApi
from distributetrain.manager.reporting.reporting import Reporter

log = logging.getLogger(__name__)

POLL_S = 10.0  # positions move when Kueue admits something: seconds matter, not milliseconds
# Until the first position is known (Kueue makes the group's Workload a moment after its
# pods), look again this often.
FIRST_POLL_S = 2.0
STOP_TIMEOUT_S = 5.0  # how long leaving the wait waits for a read in flight


def position_of(pending: Iterable[Mapping], workload: str) -> int | None:
    """The workload's place in its LocalQueue, 1 for the next one admitted (Kueue counts
    from 0); None while it is not pending (not created yet, or admitted)."""
    for item in pending:
        if (item.get("metadata") or {}).get("name") == workload:
            position = item.get("positionInLocalQueue")
            return position + 1 if isinstance(position, int) and position >= 0 else None
    return None


class QueuePositions:
    """Within ``with``: polls the workload's position and records each change."""

    def __init__(self, kube: KubeApi, reporter: Reporter, workload: str, clock: Clock, poll_s: float = POLL_S,
                 first_poll_s: float = FIRST_POLL_S):
        self.kube = kube
        self.reporter = reporter
        self.workload = workload
        self.poll_s = poll_s
        self.first_poll_s = min(first_poll_s, poll_s)
        self._clock = clock
        self._stopping = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="queue-positions", daemon=True)

    def __enter__(self) -> QueuePositions:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        with self._stopping:
            self._stopped = True
            self._stopping.notify_all()
        self._thread.join(STOP_TIMEOUT_S)

    def _pause(self, seconds: float) -> None:
        """``seconds`` of the clock, or less once the wait is left."""
        until = self._clock.monotonic() + seconds
        with self._stopping:
            while not self._stopped and self._clock.monotonic() < until:
                self._clock.wait(self._stopping, until - self._clock.monotonic())

    def _run(self) -> None:
        settings = self.reporter.settings
        recorded: int | None = None
        while not self._stopped:
            try:
                position = position_of(self.kube.pending_workloads(settings.namespace, settings.queue), self.workload)
            except (errors.NotFound, errors.Forbidden) as e:
                log.info("job %s: no queue positions (Kueue's visibility API: %s)", settings.job_name, e)
                return
            except errors.DistributeTrainError as e:
                log.debug("job %s: queue position not read: %s", settings.job_name, e)
            else:
                if position != recorded and not self._stopped:
                    if position is not None:
                        log.info("job %s: number %d in queue %s", settings.job_name, position, settings.queue)
                    if self.reporter.queue_position(position):
                        recorded = position
            self._pause(self.poll_s if recorded is not None else self.first_poll_s)
