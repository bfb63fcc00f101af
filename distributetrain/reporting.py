"""What the manager tells the world: annotations on its own pod and its termination message.

``distributetrain status`` and ``kubectl describe`` read these; the reservation
annotation is also what other managers' inventories count (see ``inventory``).
"""

from __future__ import annotations

import logging

from distributetrain import errors, names
from distributetrain.kube import Kube
from distributetrain.placement import format_plan, parse_plan
from distributetrain.settings import JobSettings

log = logging.getLogger(__name__)

TERMINATION_LOG = "/dev/termination-log"


class Reporter:
    def __init__(self, kube: Kube, settings: JobSettings):
        self.kube = kube
        self.settings = settings

    @property
    def _has_pod(self) -> bool:
        # Outside a manager pod (e.g. `distributetrain run` from a laptop) there is nothing to annotate.
        return bool(self.settings.owner_uid)

    def _annotate(self, annotations: dict[str, str | None]) -> None:
        if self._has_pod:
            self.kube.annotate_pod(self.settings.own_namespace, self.settings.job_name, annotations)

    def phase(self, phase: str) -> None:
        log.info("job %s: %s", self.settings.job_name, phase)
        try:
            self._annotate({names.ANNOTATION_PHASE: phase})
        except errors.DistributeTrainError as e:
            log.warning("could not record phase %s: %s", phase, e)

    def reserve(self, plan: list[tuple[str, int]]) -> None:
        """Record the plan and hold the chief's share until the chief exists."""
        chief_node, chief_share = plan[-1]
        self._annotate(
            {
                names.ANNOTATION_PLAN: format_plan(plan),
                names.ANNOTATION_RESERVATION: f"{chief_node}={chief_share}",
            }
        )

    def release_reservation(self) -> None:
        self._annotate({names.ANNOTATION_RESERVATION: None})

    def _annotation(self, key: str) -> str | None:
        if not self._has_pod:
            return None
        pod = self.kube.get_pod(self.settings.own_namespace, self.settings.job_name) or {}
        return (pod.get("metadata", {}).get("annotations") or {}).get(key)

    def reservation(self) -> tuple[str, int] | None:
        reserved = parse_plan(self._annotation(names.ANNOTATION_RESERVATION) or "")
        return reserved[0] if reserved else None

    def plan(self) -> list[tuple[str, int]] | None:
        """The plan recorded by pre-training (which may have run in another process)."""
        return parse_plan(self._annotation(names.ANNOTATION_PLAN) or "") or None

    def finished(self, exit_code: int, reason: str) -> None:
        phase = "Succeeded" if exit_code == 0 else "Failed"
        log.info("job %s %s (exit code %d): %s", self.settings.job_name, phase.lower(), exit_code, reason)
        try:
            self._annotate(
                {
                    names.ANNOTATION_PHASE: phase,
                    names.ANNOTATION_EXIT_CODE: str(exit_code),
                    names.ANNOTATION_REASON: reason[:1000],
                    names.ANNOTATION_RESERVATION: None,
                }
            )
        except errors.DistributeTrainError as e:
            log.warning("could not record the outcome: %s", e)
        try:
            with open(TERMINATION_LOG, "w") as f:
                f.write(reason[:4000])
        except OSError:
            pass  # not in a pod
