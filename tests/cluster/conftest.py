"""Shared local-cluster fixtures (defined in localcluster/testing.py)."""

from localcluster.testing import api_client, cluster, namespace  # noqa: F401
