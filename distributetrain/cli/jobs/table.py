"""How `list` and `status` print jobs: an aligned table, a few lines, or JSON.

Pure functions of ``state.JobStatus`` and the time now, so tests compare whole outputs.
"""

from __future__ import annotations

import json
from datetime import datetime

from distributetrain.cli.jobs.state import JobStatus, Progress, format_age, workers_field
from distributetrain.core.placement.placement import format_plan

COLUMN_GAP = "   "
MAX_REASON_CHARS = 60  # the table stays one line per job; `status` shows the whole reason
NONE = "-"
LIST_COLUMNS = ("NAME", "PHASE", "GPUS", "NODES", "AGE", "EXIT", "REASON")


def _text(value) -> str:
    return NONE if value is None or value == "" else str(value)


def _age(status: JobStatus, now: datetime) -> str:
    return format_age((now - status.created).total_seconds()) if status.created else NONE


def _phase(status: JobStatus) -> str:
    return f"{status.phase} #{status.queue_position}" if status.queue_position else status.phase


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        COLUMN_GAP.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() + "\n" for row in rows
    )


def job_table(statuses: list[JobStatus], now: datetime, with_namespace: bool) -> str:
    header = (["NAMESPACE"] if with_namespace else []) + list(LIST_COLUMNS)
    rows = [header]
    for s in statuses:
        cells = [s.name, _phase(s), _text(s.gpus), _text(format_plan(list(s.plan))), _age(s, now),
                 _text(s.exit_code), _text(_one_line(s.reason, MAX_REASON_CHARS))]
        rows.append(([s.namespace] if with_namespace else []) + cells)
    return table(rows)


def status_text(status: JobStatus, progress: Progress | None, now: datetime) -> str:
    nodes = f" on {len(status.plan)} nodes ({format_plan(list(status.plan))})" if status.plan else ""
    fields = [
        ("Name", status.name),
        ("Namespace", status.namespace),
        ("Submitted as", status.kind),
        ("Manager pod", _text(status.manager_pod)),
        ("Phase", status.phase + (f" (number {status.queue_position} in its queue)"
                                  if status.queue_position else "")),
        ("GPUs", _text(status.gpus) + nodes),
        *([("Domains", status.domains)] if status.domains else []),
        ("Age", _age(status, now)),
    ]
    if progress is not None:
        fields += [workers_field(progress, status.finished), ("Chief", _text(progress.chief))]
    if status.waiting:
        fields.append(("Waiting", "\n".join(f"{pod}: {why}" for pod, why in status.waiting)))
    if status.restarts:
        fields.append(("Restarts", f"{status.restarts} (last: {status.last_restart_reason})"))
    fields += [("Exit code", _text(status.exit_code)), ("Reason", _text(status.reason))]
    width = max(len(label) for label, _ in fields) + 3  # label, colon, two spaces
    return "".join(_field(label, value, width) for label, value in fields)


def _field(label: str, value: str, width: int) -> str:
    """"Label:  value", a value of several lines (one per waiting pod) aligned under the first."""
    first, *more = value.split("\n")
    return f"{(label + ':').ljust(width)}{first}\n" + "".join(f"{' ' * width}{line}\n" for line in more)


def status_json(status: JobStatus, progress: Progress | None, now: datetime) -> dict:
    document = {
        "name": status.name,
        "namespace": status.namespace,
        "kind": status.kind,
        "managerPod": status.manager_pod or None,
        "phase": status.phase,
        "gpus": status.gpus,
        "plan": [{"node": node, "gpus": share} for node, share in status.plan],
        "created": status.created.isoformat() if status.created else None,
        "ageSeconds": int((now - status.created).total_seconds()) if status.created else None,
        "exitCode": status.exit_code,
        "reason": status.reason or None,
        "waiting": dict(status.waiting),
        "restarts": status.restarts,
        "lastRestartReason": status.last_restart_reason or None,
        "queuePosition": status.queue_position,
        "domains": status.domains or None,
    }
    if progress is not None:
        document["workersReady"] = progress.workers_ready
        document["workers"] = progress.workers
        document["chief"] = progress.chief or None
    return document


def dumps(document) -> str:
    return json.dumps(document, indent=2) + "\n"
