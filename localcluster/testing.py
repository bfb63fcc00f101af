"""Pytest fixtures for tests that run against the local cluster.

Plain fixtures, re-exported by each test directory's conftest.py
(`from localcluster.testing import cluster, namespace, api_client`), so every
suite shares one cluster per session and one fresh namespace per test.

Set DT_KEEP_CLUSTER=1 to leave the cluster up after the session (the next
session attaches in about a second instead of starting it).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest

from localcluster.cluster import Cluster
from localcluster.layout import RunLayout

KEEP_CLUSTER_ENV = "DT_KEEP_CLUSTER"
NAMESPACE_PREFIX = "t-"
NAMESPACE_NAME_MAX_CHARS = 63
NAMESPACE_SUFFIX_HEX_CHARS = 6
TEST_NAMESPACE_LABEL = "distributetrain.test/namespace"


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The local cluster, up for the whole session and always taken down after it."""
    if os.geteuid() != 0:
        pytest.skip("the local cluster needs root (bridge, network namespaces, mounts)")
    layout = RunLayout.from_env()
    try:
        yield Cluster.up(layout=layout)
    finally:
        if os.environ.get(KEEP_CLUSTER_ENV) != "1":
            Cluster(layout).down()


@pytest.fixture(scope="session")
def api_client(cluster: Cluster):
    """A kubernetes.client.ApiClient authenticated as the cluster admin."""
    client = cluster.api_client()
    yield client
    client.close()


@pytest.fixture
def namespace(api_client, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of its own for one test, deleted after it."""
    from kubernetes import client

    name = namespace_name(request.node.name)
    core = client.CoreV1Api(api_client)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={TEST_NAMESPACE_LABEL: "true"}))
    )
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except client.ApiException as error:
            if error.status != 404:
                raise


def namespace_name(test_name: str) -> str:
    """A unique DNS-1123 label derived from the test's name."""
    suffix = uuid.uuid4().hex[:NAMESPACE_SUFFIX_HEX_CHARS]
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")
    room = NAMESPACE_NAME_MAX_CHARS - len(NAMESPACE_PREFIX) - len(suffix) - 1
    slug = slug[:room].rstrip("-")
    return f"{NAMESPACE_PREFIX}{slug}-{suffix}" if slug else f"{NAMESPACE_PREFIX}{suffix}"
