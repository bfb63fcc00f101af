"""pytest imports test files by their base name (rootdir-relative ``prepend`` import mode,
no ``__init__.py``): two files of one name in one session stop its collection, and with
it every test of the tier (``make test`` runs tests/unit and tests/cluster together)."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_has_a_name_of_its_own():
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
