"""Hypothesis strategies for names: the strings a simple pattern matches, drawn as text
(``st.from_regex`` draws the same strings at several times the cost, most of a property
test's time where a name is drawn for every node or field)."""

from __future__ import annotations

import string

from hypothesis import strategies as st

LOWER = string.ascii_lowercase
DIGITS = string.digits


def names(prefix: str = "", first: str = "", rest: str = LOWER + DIGITS, min_size: int = 0,
          max_size: int = 8) -> st.SearchStrategy[str]:
    """``prefix``, then one of ``first`` (if any), then ``min_size`` to ``max_size`` of
    ``rest``: ``names("node-", min_size=1, max_size=4)`` is ``node-[a-z0-9]{1,4}``."""
    tail = st.text(rest, min_size=min_size, max_size=max_size)
    if first:
        return st.builds(lambda head, more: prefix + head + more, st.sampled_from(first), tail)
    return tail.map(lambda more: prefix + more)
