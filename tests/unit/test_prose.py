"""Comments and docstrings say why the code is as it is, not how it came to be: a phrase
that narrates history ("used to", "as before") describes a version the reader cannot
see, and goes stale with the next change. History belongs in git and ``docs/``."""

from __future__ import annotations

import re
from pathlib import Path

import distributetrain

CHECKOUT = Path(distributetrain.__file__).parent.parent
CHECKED_DIRS = ("distributetrain", "localcluster")
CHECKED_SUFFIXES = (".py", ".sh")
HISTORY_PHRASES = re.compile(
    r"\b(used to|as before|no longer|previously|formerly|as it always was|today's)\b", re.IGNORECASE)


def checked_files() -> list[Path]:
    return sorted(path for folder in CHECKED_DIRS for path in (CHECKOUT / folder).rglob("*")
                  if path.suffix in CHECKED_SUFFIXES and path.is_file())


def test_there_are_files_to_check():
    assert len(checked_files()) > 100


def test_no_comment_narrates_history():
    found = [f"{path.relative_to(CHECKOUT)}:{number}: {line.strip()}"
             for path in checked_files()
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if HISTORY_PHRASES.search(line)]
    assert not found, "say why, not what changed (history belongs in git):\n" + "\n".join(found)
