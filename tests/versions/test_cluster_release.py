"""The cluster runs the Kubernetes release asked for (DT_KUBERNETES_VERSION, else 1.34): its
API server and a node's kubelet report the patch release the release's wrapper module pins.
The first test of `make test-versions`' smoke tier (scripts/test-versions.sh), which runs it on
each release; on the shared cluster it checks the default."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from localcluster import versions

pytestmark = pytest.mark.cluster


def test_the_api_server_and_a_kubelet_run_the_release_asked_for(cluster, api_client):
    pinned = versions.pinned(versions.selected())
    assert cluster.version() == versions.selected()
    assert client.VersionApi(api_client).get_code().git_version == pinned
    node = f"release-{uuid.uuid4().hex[:6]}"
    with cluster.add_nodes({node: 1}):
        assert client.CoreV1Api(api_client).read_node(node).status.node_info.kubelet_version == pinned
