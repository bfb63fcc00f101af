"""The manager against the real local control plane, as a pod under its ServiceAccount."""

import pytest

from jobharness import Jobs, apply_rbac, delete_cluster_scoped
from localcluster.testing import api_client, cluster, namespace  # noqa: F401


@pytest.fixture
def rbac(api_client, namespace):  # noqa: F811
    documents = apply_rbac(api_client, namespace)
    yield documents
    delete_cluster_scoped(api_client, documents)


@pytest.fixture
def jobs(api_client, namespace, rbac):  # noqa: F811
    return Jobs(api_client, namespace)
