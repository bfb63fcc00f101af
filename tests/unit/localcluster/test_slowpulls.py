"""Which pulls the registry's proxy holds, and for how long (localcluster/localcluster/slowpulls.py)."""

from __future__ import annotations

import pytest

from localcluster import registry, slowpulls


@pytest.mark.parametrize(("image", "resolved"), [
    ("python:3.11", "docker.io/library/python:3.11"),
    ("distributetrain/base:0.1.0", "docker.io/distributetrain/base:0.1.0"),
    ("docker.io/library/python:3.11", "docker.io/library/python:3.11"),
    ("nvcr.io/nvidia/tensorflow:24.03-tf2-py3", "nvcr.io/nvidia/tensorflow:24.03-tf2-py3"),
    ("localhost:5000/team/job:1", "localhost:5000/team/job:1"),
    ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
])
def test_images_are_named_as_containerd_resolves_them(image, resolved):
    assert slowpulls.normalize(image) == resolved


@pytest.mark.parametrize(("podman_name", "published_as"), [
    ("localhost/distributetrain/base:0.1.0", "docker.io/distributetrain/base:0.1.0"),
    ("docker.io/library/python:3.11.10-slim-bookworm", "docker.io/library/python:3.11.10-slim-bookworm"),
    ("nvcr.io/nvidia/tensorflow:24.03-tf2-py3", "nvcr.io/nvidia/tensorflow:24.03-tf2-py3"),
])
def test_images_podman_built_are_published_under_the_names_pods_use(podman_name, published_as):
    assert registry.qualified(podman_name) == published_as


DELAYS = {
    "all": {"docker.io/distributetrain/base:0.1.0": 60},
    "nodes": {"10.233.0.12": {"docker.io/distributetrain/base:0.1.0": 0, "docker.io/library/python:3": 5}},
}


@pytest.mark.parametrize(("node_ip", "image", "delay"), [
    ("10.233.0.11", "docker.io/distributetrain/base:0.1.0", 60.0),  # the cluster's delay
    ("10.233.0.12", "docker.io/distributetrain/base:0.1.0", 0.0),  # the node's own, over it
    ("10.233.0.12", "docker.io/library/python:3", 5.0),
    ("10.233.0.11", "docker.io/library/python:3", 0.0),  # set for another node only
    ("10.233.0.11", "docker.io/distributetrain/manager:0.1.0", 0.0),
])
def test_a_nodes_own_delay_wins_over_the_clusters(node_ip, image, delay):
    assert slowpulls.delay_for(DELAYS, node_ip, image) == delay


@pytest.mark.parametrize(("path", "held"), [
    ("/v2/docker.io/distributetrain/base/manifests/0.1.0", True),
    ("/v2/docker.io/distributetrain/base/manifests/0.1.0?ns=docker.io", True),
    ("/v2/docker.io/distributetrain/base/manifests/sha256:" + "a" * 64, False),  # by digest: the same pull
    ("/v2/docker.io/distributetrain/base/blobs/sha256:" + "a" * 64, False),
    ("/v2/", False),
])
def test_only_a_manifest_by_tag_starts_a_pull(path, held):
    assert bool(slowpulls.MANIFEST_BY_TAG.match(path.split("?", 1)[0])) is held
