"""Container log files in the CRI format, written by the agent and read by the log server.

Each container attempt writes `<pod dir>/logs/<container>/<restartCount>.log`,
one line per output line as containerd writes them:
`<RFC3339Nano time> <stdout|stderr> <F|P> <text>` (P marks a line split
because it was too long or had no newline yet). Keeping the kubelet's format
gives `kubectl logs --timestamps`, `--tail` and `--previous` their real
meaning.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator
from pathlib import Path

# containerd splits longer lines into partial (P) records of this size.
MAX_LINE_BYTES = 16 * 1024
FOLLOW_POLL_S = 0.2


def now_rfc3339_nano() -> str:
    now = time.time_ns()
    seconds, nanos = divmod(now, 10**9)
    stamp = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{nanos:09d}Z"


class LogWriter:
    """Appends one container attempt's stdout and stderr to its log file (single writer thread)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "ab", buffering=0)
        self._partial: dict[str, bytes] = {"stdout": b"", "stderr": b""}
        # Set when both streams reached end of file: followers stop there.
        self.closed = threading.Event()

    def write(self, stream: str, data: bytes) -> None:
        *lines, rest = (self._partial[stream] + data).split(b"\n")
        records = []
        for line in lines:
            while len(line) > MAX_LINE_BYTES:
                records.append(self._record(stream, b"P", line[:MAX_LINE_BYTES]))
                line = line[MAX_LINE_BYTES:]
            records.append(self._record(stream, b"F", line))
        while len(rest) >= MAX_LINE_BYTES:
            records.append(self._record(stream, b"P", rest[:MAX_LINE_BYTES]))
            rest = rest[MAX_LINE_BYTES:]
        self._partial[stream] = rest
        if records:
            self._file.write(b"".join(records))

    def end(self, stream: str) -> None:
        """A stream reached end of file: flush what is left of its last line."""
        if self._partial[stream]:
            # containerd marks an unterminated last line partial, so readers add no newline.
            self._file.write(self._record(stream, b"P", self._partial[stream]))
            self._partial[stream] = b""

    def close(self) -> None:
        self._file.close()
        self.closed.set()

    @staticmethod
    def _record(stream: str, tag: bytes, text: bytes) -> bytes:
        return now_rfc3339_nano().encode() + b" " + stream.encode() + b" " + tag + b" " + text + b"\n"


def render(record: bytes, timestamps: bool) -> bytes:
    """A log record as the kubelet returns it: the text, with a newline unless partial."""
    try:
        stamp, _stream, tag, text = record.rstrip(b"\n").split(b" ", 3)
    except ValueError:
        return b""
    out = text if tag == b"P" else text + b"\n"
    return stamp + b" " + out if timestamps else out


def read_log(
    path: Path, tail_lines: int | None, timestamps: bool, follow: bool, closed: threading.Event | None
) -> Iterator[bytes]:
    """Yield rendered records: the last tail_lines (all if None), then new ones while following."""
    with open(path, "rb") as log_file:
        *records, pending = log_file.read().split(b"\n")
        if tail_lines is not None:
            records = records[-tail_lines:] if tail_lines > 0 else []
        for record in records:
            yield render(record, timestamps)
        if not follow or closed is None:
            return
        while True:
            finished = closed.is_set()
            chunk = log_file.read()
            if chunk:
                *records, pending = (pending + chunk).split(b"\n")
                for record in records:
                    yield render(record, timestamps)
            elif finished:
                return
            else:
                time.sleep(FOLLOW_POLL_S)
