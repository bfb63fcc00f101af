"""What a test does when a tool it needs is missing: skip on a developer's machine,
fail on CI (CI=true), where every prerequisite is installed and a skip would hide a gap."""

import os

import pytest


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: a missing prerequisite fails rather than skips)")
    pytest.skip(reason)
