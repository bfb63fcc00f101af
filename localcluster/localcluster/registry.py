"""The local image registry: what every node pulls from, as real nodes pull from theirs.

The upstream distribution registry runs on the host's loopback; the nodes pull through
`slowpulls` on the cluster bridge (10.233.0.1:5000, plain HTTP: a private network),
which can make a pull as slow as a real one. The registry's storage lives in the cache,
so an image is pushed once per machine. `publish` pushes the images podman built,
under a path named after the registry they name: `distributetrain/base:0.1.0` is
docker.io's, stored as docker.io/distributetrain/base. Each node's containerd mirrors
those registries to this one (node/config.py, `registry_hosts`), so pods keep the
image names users write, and a name nobody published fails as on a real node:
ErrImagePull, then ImagePullBackOff.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from localcluster import netsetup, slowpulls
from localcluster.layout import RunLayout, cache_dir
from localcluster.node.config import Mirror
from localcluster.podman import podman

log = logging.getLogger(__name__)

REGISTRY_HOST = "127.0.0.1"
REGISTRY_PORT = 5001
# Where nodes pull from: the slowpulls proxy in front of the registry.
PULL_PORT = 5000
# The registries whose images the nodes get from the local one.
MIRRORED_REGISTRIES = ("docker.io", "registry.k8s.io", "nvcr.io", "quay.io", "ghcr.io")
PUSH_TIMEOUT_S = 900.0
PROBE_TIMEOUT_S = 2.0


class PublishError(RuntimeError):
    """An image could not be pushed to the local registry."""


def address() -> str:
    """The registry itself, where podman pushes."""
    return f"{REGISTRY_HOST}:{REGISTRY_PORT}"


def pull_address() -> str:
    """Where nodes pull from."""
    return f"{netsetup.HOST_IP}:{PULL_PORT}"


def mirror() -> Mirror:
    return Mirror(url=f"http://{pull_address()}", registries=MIRRORED_REGISTRIES)


def pullable() -> bool:
    """Whether the registry answers through the pull proxy, as the nodes reach it."""
    connection = http.client.HTTPConnection(netsetup.HOST_IP, PULL_PORT, timeout=PROBE_TIMEOUT_S)
    try:
        connection.request("GET", "/v2/")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


# Every manifest form podman pushes; the registry answers a tag's digest in the form stored.
MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
))


@dataclass(frozen=True)
class _Manifest:
    """The registry's answer for a tag's manifest."""

    digest: str | None  # its Docker-Content-Digest: the manifest's, in the form stored
    body: bytes  # empty for a HEAD


def digest_of(reference: str) -> str | None:
    """The manifest digest the registry holds for `reference` (as containerd names it:
    docker.io/distributetrain/base:0.1.0); None when it holds none or does not answer."""
    manifest = _manifest("HEAD", reference)
    return manifest.digest if manifest else None


def config_digest_of(reference: str) -> str | None:
    """The digest of `reference`'s image config (the image's ID, as the CRI plugin names
    it: sha256:...); None when the registry holds no single-image manifest for it."""
    manifest = _manifest("GET", reference)
    if not manifest:
        return None
    try:
        return (json.loads(manifest.body).get("config") or {}).get("digest")
    except ValueError:
        return None


def _manifest(method: str, reference: str) -> _Manifest | None:
    """The registry's answer to `method` on the manifest of `reference`'s tag; None for an
    untagged reference, a tag it does not hold (any status but 200), or no answer."""
    repository, tag = split_reference(reference)
    if tag is None:
        return None
    connection = http.client.HTTPConnection(REGISTRY_HOST, REGISTRY_PORT, timeout=PROBE_TIMEOUT_S)
    try:
        connection.request(method, f"/v2/{repository}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES})
        response = connection.getresponse()
        body = response.read()
        return _Manifest(response.getheader("Docker-Content-Digest"), body) if response.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def split_reference(reference: str) -> tuple[str, str | None]:
    """(repository, tag) of a tagged reference; (reference, None) for a digest or no tag."""
    if "@" in reference or "/" not in reference:  # a digest, or an image ID (sha256:...)
        return reference, None
    repository, colon, tag = reference.rpartition(":")
    if not colon or "/" in tag:  # the colon was a registry's port
        return reference, None
    return repository, tag


def storage_dir() -> Path:
    return cache_dir() / "registry" / "storage"


def config() -> dict:
    """The registry's configuration (YAML; JSON is YAML)."""
    return {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage_dir())}, "delete": {"enabled": True}},
        "http": {"addr": address(), "secret": "localcluster"},
    }


def write_config(layout: RunLayout) -> None:
    layout.registry_config.write_text(json.dumps(config(), indent=2) + "\n")


def command(registry: Path, config_file: Path) -> list[str]:
    return [str(registry), "serve", str(config_file)]


def pull_proxy_command(python: Path, delays_file: Path) -> list[str]:
    return [str(python), "-m", "localcluster.slowpulls", f"--listen={pull_address()}",
            f"--registry={address()}", f"--delays={delays_file}"]


def qualified(podman_name: str) -> str:
    """The name containerd resolves for an image podman lists: podman calls images built from
    an unqualified tag `localhost/...`; users' manifests name them docker.io's."""
    registry, _, rest = podman_name.partition("/")
    return slowpulls.normalize(rest if registry == "localhost" else podman_name)


def publish() -> list[str]:
    """Push every tagged image of the project's podman store that changed since it was
    pushed; returns the names pushed. Layers the registry has are not sent again."""
    stamps = _read_stamps()
    pushed = []
    for name, image_id in _podman_images().items():
        target = qualified(name)
        if stamps.get(target) == image_id:
            continue
        started = time.monotonic()
        result = podman(["push", "--quiet", "--tls-verify=false", image_id, f"{address()}/{target}"],
                        check=False, timeout_s=PUSH_TIMEOUT_S)
        if result.returncode != 0:
            raise PublishError(f"pushing {name} to the local registry: {result.stderr.strip()}")
        log.info("published %s in %.1f s", target, time.monotonic() - started)
        stamps[target] = image_id
        _write_stamps(stamps)
        pushed.append(target)
    return pushed


def published() -> list[str]:
    """The references pushed to the registry by `publish` (as containerd names them)."""
    return sorted(_read_stamps())


def unpublish(reference: str) -> None:
    """Delete `reference`'s manifest from the registry (its layers stay until a garbage
    collection) and forget it was pushed."""
    digest = digest_of(reference)
    if digest is not None:
        repository, _ = split_reference(reference)
        connection = http.client.HTTPConnection(REGISTRY_HOST, REGISTRY_PORT, timeout=PROBE_TIMEOUT_S)
        try:
            connection.request("DELETE", f"/v2/{repository}/manifests/{digest}")
            response = connection.getresponse()
            response.read()
            if response.status not in (202, 404):
                raise PublishError(f"deleting {reference} from the local registry: HTTP {response.status}")
        finally:
            connection.close()
    stamps = _read_stamps()
    if stamps.pop(reference, None) is not None:
        _write_stamps(stamps)


def _stamps_file() -> Path:
    """{name: podman image ID} of what was pushed, so an unchanged image is not pushed again."""
    return storage_dir() / "published.json"


def _read_stamps() -> dict[str, str]:
    return json.loads(_stamps_file().read_text()) if _stamps_file().exists() else {}


def _write_stamps(stamps: dict[str, str]) -> None:
    # Written aside and renamed into place: another process (a test worker joining the
    # session) reads the file while a test publishes, and must never see it half-written.
    target = _stamps_file()
    staging = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    staging.write_text(json.dumps(stamps, indent=2, sort_keys=True) + "\n")
    os.replace(staging, target)


def _podman_images() -> dict[str, str]:
    """{name: image ID} of the tagged images in the project's podman storage."""
    result = podman(["images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"], check=True)
    images = {}
    for line in result.stdout.splitlines():
        name, image_id = line.split()
        if not name.startswith("<none>"):
            images[name] = image_id
    return images
