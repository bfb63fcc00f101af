"""Installing a controller's objects (localcluster/localcluster/controllers.py)."""

from types import SimpleNamespace

import pytest
from kubernetes import client

from localcluster import controllers


def conflict(status):
    return client.ApiException(status=status, reason="Conflict" if status == 409 else "Error")


def test_a_replace_that_lost_a_race_is_read_and_tried_again():
    """Seen in a full test run: the CRD existed, and the apiserver updated its status
    between the read and the replace."""
    versions, replaced = iter(["5", "6"]), []

    def replace(version):
        replaced.append(version)
        if version == "5":
            raise conflict(409)

    def create():
        raise conflict(409)

    controllers.create_or_replace(create, replace, lambda: SimpleNamespace(metadata=SimpleNamespace(
        resource_version=next(versions))))
    assert replaced == ["5", "6"]


def test_other_errors_and_endless_conflicts_are_raised():
    read = lambda: SimpleNamespace(metadata=SimpleNamespace(resource_version="1"))  # noqa: E731

    def exists():
        raise conflict(409)

    def always(status):
        def replace(version):
            raise conflict(status)
        return replace

    with pytest.raises(client.ApiException) as refused:
        controllers.create_or_replace(exists, always(403), read)
    assert refused.value.status == 403
    with pytest.raises(client.ApiException) as conflicted:
        controllers.create_or_replace(exists, always(409), read)
    assert conflicted.value.status == 409
