"""Placement lock: when another manager's lease counts as held."""

from datetime import datetime, timedelta, timezone

from distributetrain.lock import _expired, _format

NOW = datetime(2026, 11, 20, 12, 0, 0, tzinfo=timezone.utc)


def test_fresh_lease_is_held():
    assert not _expired({"holderIdentity": "ns/a", "renewTime": _format(NOW - timedelta(seconds=5)),
                         "leaseDurationSeconds": 30}, NOW)


def test_lease_not_renewed_within_its_duration_is_expired():
    assert _expired({"holderIdentity": "ns/a", "renewTime": _format(NOW - timedelta(seconds=31)),
                     "leaseDurationSeconds": 30}, NOW)


def test_released_lease_is_free():
    assert _expired({"holderIdentity": None, "leaseDurationSeconds": 30}, NOW)
