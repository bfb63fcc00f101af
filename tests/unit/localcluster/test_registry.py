"""How the local registry names what containerd lists, and what it answers for a tag."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from harness.apiserver import HttpFake, Reply, Request
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


# What the fake registry holds: HEAD and GET of /v2/<repository>/manifests/<tag>.
IMAGE_DIGEST = "sha256:" + "11" * 32
CONFIG_DIGEST = "sha256:" + "22" * 32
MANIFESTS = {
    "/v2/team/image/manifests/v1": json.dumps({"config": {"digest": CONFIG_DIGEST}}).encode(),
    "/v2/team/index/manifests/v1": json.dumps({"manifests": []}).encode(),  # a list: no config of its own
    "/v2/team/broken/manifests/v1": b"not json",
}


@pytest.fixture
def local_registry(monkeypatch):
    """A registry on a free loopback port that answers the manifests above, and the
    Accept header of every request it was sent, by method and path."""

    def answer(request: Request) -> Reply:
        body = MANIFESTS.get(request.path)
        if body is None:
            return Reply(404)
        return Reply(200, body, headers={"Docker-Content-Digest": IMAGE_DIGEST})

    with HttpFake(answer, host=registry.REGISTRY_HOST) as server:
        monkeypatch.setattr(registry, "REGISTRY_PORT", server.port)
        yield server


def asked(server: HttpFake) -> list[tuple[str, str, str]]:
    return [(r.method, r.path, r.headers["Accept"]) for r in server.received]


def test_a_tag_s_digest_and_config_digest_are_the_registry_s_answer_to_any_manifest_form(local_registry):
    assert registry.digest_of("team/image:v1") == IMAGE_DIGEST
    assert registry.config_digest_of("team/image:v1") == CONFIG_DIGEST
    assert asked(local_registry) == [("HEAD", "/v2/team/image/manifests/v1", registry.MANIFEST_TYPES),
                              ("GET", "/v2/team/image/manifests/v1", registry.MANIFEST_TYPES)]


def test_what_the_registry_does_not_hold_has_no_digest(local_registry):
    assert [registry.digest_of("team/image:v2"), registry.config_digest_of("team/image:v2")] == [None, None]
    # A manifest list has no config of its own, and a body that is not JSON none at all.
    assert [registry.config_digest_of("team/index:v1"), registry.config_digest_of("team/broken:v1")] == [None, None]
    # Nothing to ask for an untagged reference.
    assert [registry.digest_of("team/image"), registry.config_digest_of("sha256:" + "cd" * 32)] == [None, None]
    assert [path for _, path, _ in asked(local_registry)] == ["/v2/team/image/manifests/v2"] * 2 + [
        "/v2/team/index/manifests/v1", "/v2/team/broken/manifests/v1"]


def test_a_registry_that_does_not_answer_has_no_digest(local_registry, monkeypatch):
    with socket.socket() as closed:  # a port nothing listens on once this is closed
        closed.bind((registry.REGISTRY_HOST, 0))
        monkeypatch.setattr(registry, "REGISTRY_PORT", closed.getsockname()[1])
    assert [registry.digest_of("team/image:v1"), registry.config_digest_of("team/image:v1")] == [None, None]


def test_a_reader_never_sees_the_published_list_half_written(tmp_path, monkeypatch):
    """A test worker joining the session reads what was published while another test
    publishes (CI once failed with an empty file): every read is a whole list."""
    monkeypatch.setattr(registry, "storage_dir", lambda: tmp_path)
    big = {f"docker.io/team/image-{n}:v1": "sha256:" + "ab" * 32 for n in range(500)}
    stop = threading.Event()

    def keep_publishing() -> None:
        while not stop.is_set():
            registry._write_stamps(big)

    writer = threading.Thread(target=keep_publishing)
    registry._write_stamps(big)
    writer.start()
    try:
        for _ in range(300):
            assert registry.published() == sorted(big)
    finally:
        stop.set()
        writer.join()
    assert [p.name for p in tmp_path.iterdir()] == ["published.json"]
