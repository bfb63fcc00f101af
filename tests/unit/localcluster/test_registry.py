"""How the local registry names what containerd lists."""

from __future__ import annotations

import pytest

from localcluster import registry


@pytest.mark.parametrize("reference, expected", [
    ("docker.io/distributetrain/base:0.1.0", ("docker.io/distributetrain/base", "0.1.0")),
    ("registry.k8s.io/pause:3.10", ("registry.k8s.io/pause", "3.10")),
    ("10.233.0.1:5000/team/image:v2", ("10.233.0.1:5000/team/image", "v2")),
    # No tag to look up: a registry's port, a digest, an image ID.
    ("10.233.0.1:5000/team/image", ("10.233.0.1:5000/team/image", None)),
    ("docker.io/distributetrain/base@sha256:" + "ab" * 32, ("docker.io/distributetrain/base@sha256:" + "ab" * 32, None)),
    ("sha256:" + "cd" * 32, ("sha256:" + "cd" * 32, None)),
])
def test_a_reference_splits_into_repository_and_tag(reference, expected):
    assert registry.split_reference(reference) == expected


def test_containerd_names_podman_s_local_builds_as_docker_hub_s():
    assert registry.qualified("localhost/distributetrain/base:0.1.0") == "docker.io/distributetrain/base:0.1.0"
    assert registry.qualified("nvcr.io/nvidia/tensorflow:24.03-tf2-py3") == "nvcr.io/nvidia/tensorflow:24.03-tf2-py3"
