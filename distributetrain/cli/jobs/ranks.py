"""One Horovod rank's lines of the chief's output: `distributetrain logs NAME --rank N`.

horovodrun 0.28.1 (``horovod/runner/common/util/safe_shell_exec.py``,
``prefix_connection``, given the rank as its index by ``gloo_run``) writes each line of
each rank as ``{time}[{rank}]<{stdout|stderr}>:{line}``, ``time`` being
``time.asctime()`` with ``--prefix-output-with-timestamp`` and empty otherwise. A line
ends at "\\n" or at "\\r" (each update of a progress bar is a line of its own, prefixed
again). horovodrun's own lines and the chief script's carry no prefix.

The filter keeps rank N's lines without their prefix, as the log arrives: chunks of a
followed log split lines anywhere, so an unfinished line waits for its end. (A rank whose
output ends without a line end runs into the next line horovodrun writes; that line is
then taken for the rest of it.)
"""

from __future__ import annotations

import re

# The optional asctime, e.g. "Fri Jan  2 12:00:00 2026", then "[rank]<stream>:".
RANK_PREFIX = re.compile(
    r"(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?\[(\d+)\]<(?:stdout|stderr)>:"
)
LINE_END = re.compile(r"[\r\n]")


def parse_rank(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"must be a Horovod rank, a whole number from 0 (e.g. 1), got {text!r}")
    return int(text)


class RankFilter:
    """Feed it the log as it comes; it returns rank N's lines completed so far, unprefixed."""

    def __init__(self, rank: int):
        self.rank = rank
        self._unfinished = ""

    def feed(self, text: str) -> str:
        text = self._unfinished + text
        kept, start = [], 0
        for end in LINE_END.finditer(text):
            kept.append(self._payload(text[start:end.end()]))
            start = end.end()
        self._unfinished = text[start:]
        return "".join(kept)

    def flush(self) -> str:
        """The last line, when the output ended without a line end."""
        line, self._unfinished = self._unfinished, ""
        return self._payload(line)

    def _payload(self, line: str) -> str:
        prefix = RANK_PREFIX.match(line)
        return line[prefix.end():] if prefix and int(prefix.group(1)) == self.rank else ""
