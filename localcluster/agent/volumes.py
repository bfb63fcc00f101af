"""Pod volumes materialised as host directories, and each container's mount list.

Secret, ConfigMap, projected and downwardAPI volumes are written the way the
kubelet's atomic writer lays them out (`..<timestamp>/` holding the files,
`..data` pointing at it, and a symlink per top-level entry), with the
requested file modes, owned by root. Their root directory is world-writable
and sticky (1777) because the kubelet backs them with an emptyDir/tmpfs whose
root has that mode; sshd with StrictModes therefore refuses an authorized_keys
inside such a volume, exactly as on a real cluster. Kubelet mounts these
volume kinds read-only; emptyDir, hostPath and claims honour readOnly.

An emptyDir with `medium: Memory` is a tmpfs (sized by its sizeLimit, else the
node's allocatable memory), as the kubelet makes it. The runtime bind-mounts the
host directories at their mountPaths in the container.
"""

from __future__ import annotations

import base64
import datetime
import logging
import os
import posixpath
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from localcluster.agent.containerenv import field_value, resource_value
from localcluster.agent.quantity import parse_quantity

log = logging.getLogger(__name__)

DEFAULT_FILE_MODE = 0o644
API_VOLUME_DIR_MODE = 0o1777
EMPTY_DIR_MODE = 0o777
DEFAULT_TOKEN_EXPIRATION_S = 3600
KUBE_ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
READ_ONLY_KINDS = ("secret", "configMap", "projected", "downwardAPI")


class VolumeError(Exception):
    """A volume cannot be set up yet (missing object, unbound claim); the kubelet retries."""


class VolumeObjects(Protocol):
    def secret(self, namespace: str, name: str) -> dict | None: ...

    def config_map(self, namespace: str, name: str) -> dict | None: ...

    def claim(self, namespace: str, name: str) -> dict | None: ...

    def persistent_volume(self, name: str) -> dict | None: ...

    def service_account_token(self, pod: dict, audience: str | None, expiration_s: int) -> str: ...


@dataclass(frozen=True)
class Mount:
    """One bind mount into a container."""

    source: str
    target: str
    readonly: bool


@dataclass(frozen=True)
class VolumeContext:
    """What downwardAPI items and the token's ca.crt need beyond the pod."""

    pod_ip: str
    host_ip: str
    ca_file: Path
    node_allocatable: Mapping[str, str]


def prepare_volumes(pod: dict, volumes_dir: Path, objects: VolumeObjects, context: VolumeContext) -> dict[str, str]:
    """Create every volume of the pod on the host; returns volume name -> host path."""
    paths = {}
    for volume in pod["spec"].get("volumes") or []:
        paths[volume["name"]] = _prepare_volume(pod, volume, volumes_dir / volume["name"], objects, context)
    return paths


def volume_kind(volume: dict) -> str:
    return next((key for key in volume if key != "name"), "emptyDir")


def container_mounts(pod: dict, container: dict, volume_paths: Mapping[str, str]) -> list[Mount]:
    """The container's volumeMounts as bind mounts, parents before children."""
    kinds = {volume["name"]: volume_kind(volume) for volume in pod["spec"].get("volumes") or []}
    mounts = []
    for volume_mount in container.get("volumeMounts") or []:
        name = volume_mount["name"]
        if name not in volume_paths:
            raise VolumeError(f"volumeMount {name!r} of container {container['name']!r} has no volume")
        source = volume_paths[name]
        sub_path = volume_mount.get("subPath")
        if sub_path:
            source = _inside(source, sub_path)
            if not os.path.lexists(source):
                os.makedirs(source, exist_ok=True)
        readonly = bool(volume_mount.get("readOnly")) or kinds.get(name) in READ_ONLY_KINDS
        mounts.append(Mount(source=source, target=posixpath.normpath(volume_mount["mountPath"]), readonly=readonly))
    return mounts


def sort_mounts(mounts: list[Mount]) -> list[Mount]:
    """Shallow targets first, so a volume at /a/b lands inside the one at /a (stable otherwise)."""
    return sorted(mounts, key=lambda mount: len([part for part in mount.target.split("/") if part]))


def _prepare_volume(pod: dict, volume: dict, path: Path, objects: VolumeObjects, context: VolumeContext) -> str:
    namespace = pod["metadata"]["namespace"]
    kind = volume_kind(volume)
    source = volume.get(kind) or {}
    if kind == "emptyDir":
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(EMPTY_DIR_MODE)
        if source.get("medium") == "Memory" and not os.path.ismount(path):
            _mount_tmpfs(path, source.get("sizeLimit") or context.node_allocatable.get("memory"))
        return str(path)
    if kind == "hostPath":
        return _host_path(source["path"], source.get("type") or "")
    if kind == "persistentVolumeClaim":
        return _claim_path(namespace, source["claimName"], objects)
    if kind == "secret":
        files = _secret_files(namespace, source.get("secretName", ""), source, objects, source.get("defaultMode"))
    elif kind == "configMap":
        files = _config_map_files(namespace, source["name"], source, objects, source.get("defaultMode"), context)
    elif kind == "downwardAPI":
        files = _downward_files(pod, source.get("items") or [], source.get("defaultMode"), context)
    elif kind == "projected":
        files = _projected_files(pod, source, objects, context)
    else:
        raise VolumeError(f"volume {volume['name']!r}: {kind} volumes are not supported by this agent")
    write_atomic_dir(path, files, API_VOLUME_DIR_MODE)
    return str(path)


def _mount_tmpfs(path: Path, size: str | None) -> None:
    options = f"mode={EMPTY_DIR_MODE:o}" + (f",size={int(parse_quantity(size))}" if size else "")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise VolumeError(f"emptyDir {path.name!r} (medium Memory): mount tmpfs failed: {result.stderr.strip()}")


def unmount_volumes(volumes_dir: Path) -> None:
    """Unmount the memory-backed emptyDirs under ``volumes_dir`` (before its files are removed)."""
    with open("/proc/self/mountinfo") as mountinfo:
        points = [line.split()[4].encode().decode("unicode_escape") for line in mountinfo]
    for point in sorted((p for p in points if p.startswith(f"{volumes_dir}/")), key=len, reverse=True):
        subprocess.run(["umount", point], capture_output=True, check=False)


def _host_path(path: str, kind: str) -> str:
    exists = os.path.lexists(path)
    if kind in ("", "DirectoryOrCreate") and not exists:
        # containerd creates a missing hostPath source as a directory, too.
        os.makedirs(path, mode=0o755, exist_ok=True)
    elif kind == "FileOrCreate" and not exists:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a"):
            pass
        os.chmod(path, DEFAULT_FILE_MODE)
    elif not exists:
        raise VolumeError(f"hostPath type check failed: {path} is not a {kind}")
    return path


def _claim_path(namespace: str, claim_name: str, objects: VolumeObjects) -> str:
    claim = objects.claim(namespace, claim_name)
    if claim is None:
        raise VolumeError(f'persistentvolumeclaim "{claim_name}" not found')
    volume_name = claim.get("spec", {}).get("volumeName")
    if not volume_name or claim.get("status", {}).get("phase") != "Bound":
        raise VolumeError(f'persistentvolumeclaim "{claim_name}" is not bound')
    volume = objects.persistent_volume(volume_name)
    if volume is None:
        raise VolumeError(f'persistentvolume "{volume_name}" not found')
    spec = volume["spec"]
    if "hostPath" in spec:
        return _host_path(spec["hostPath"]["path"], spec["hostPath"].get("type") or "")
    if "local" in spec:
        return _host_path(spec["local"]["path"], "Directory")
    raise VolumeError(f"persistentvolume {volume_name!r}: only hostPath and local volumes are supported by this agent")


def _select_items(
    data: Mapping[str, bytes], source: dict, default_mode: int | None, what: str
) -> dict[str, tuple[bytes, int]]:
    mode = DEFAULT_FILE_MODE if default_mode is None else default_mode
    items = source.get("items")
    if not items:
        return {key: (value, mode) for key, value in data.items()}
    files = {}
    for item in items:
        if item["key"] not in data:
            if source.get("optional"):
                continue
            raise VolumeError(f"{what}: key {item['key']!r} not found")
        files[item["path"]] = (data[item["key"]], item.get("mode", mode))
    return files


def _secret_files(namespace, name, source, objects, default_mode) -> dict[str, tuple[bytes, int]]:
    secret = objects.secret(namespace, name)
    if secret is None:
        if source.get("optional"):
            return {}
        raise VolumeError(f'secret "{name}" not found')
    data = {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}
    return _select_items(data, source, default_mode, f"secret {namespace}/{name}")


def _config_map_files(namespace, name, source, objects, default_mode, context) -> dict[str, tuple[bytes, int]]:
    config_map = objects.config_map(namespace, name)
    if config_map is None and name == KUBE_ROOT_CA_CONFIG_MAP:
        # The root CA publisher may not have reached a brand-new namespace yet.
        config_map = {"data": {"ca.crt": context.ca_file.read_text()}}
    if config_map is None:
        if source.get("optional"):
            return {}
        raise VolumeError(f'configmap "{name}" not found')
    data = {key: value.encode() for key, value in (config_map.get("data") or {}).items()}
    data.update({key: base64.b64decode(value) for key, value in (config_map.get("binaryData") or {}).items()})
    return _select_items(data, source, default_mode, f"configmap {namespace}/{name}")


def _downward_files(pod, items, default_mode, context) -> dict[str, tuple[bytes, int]]:
    mode = DEFAULT_FILE_MODE if default_mode is None else default_mode
    files = {}
    for item in items:
        if "fieldRef" in item:
            value = field_value(pod, item["fieldRef"]["fieldPath"], context.pod_ip, context.host_ip)
        else:
            ref = item["resourceFieldRef"]
            value = resource_value(pod, ref, ref.get("containerName", ""), context.node_allocatable)
        files[item["path"]] = (value.encode(), item.get("mode", mode))
    return files


def _projected_files(pod, source, objects, context) -> dict[str, tuple[bytes, int]]:
    namespace = pod["metadata"]["namespace"]
    default_mode = source.get("defaultMode")
    files: dict[str, tuple[bytes, int]] = {}
    for projection in source.get("sources") or []:
        if "secret" in projection:
            ref = projection["secret"]
            files.update(_secret_files(namespace, ref["name"], ref, objects, default_mode))
        elif "configMap" in projection:
            ref = projection["configMap"]
            files.update(_config_map_files(namespace, ref["name"], ref, objects, default_mode, context))
        elif "downwardAPI" in projection:
            files.update(_downward_files(pod, projection["downwardAPI"].get("items") or [], default_mode, context))
        elif "serviceAccountToken" in projection:
            ref = projection["serviceAccountToken"]
            token = objects.service_account_token(
                pod, ref.get("audience"), ref.get("expirationSeconds", DEFAULT_TOKEN_EXPIRATION_S)
            )
            mode = DEFAULT_FILE_MODE if default_mode is None else default_mode
            files[ref["path"]] = (token.encode(), mode)
        else:
            kind = next(iter(projection), "?")
            raise VolumeError(f"projected {kind} sources are not supported by this agent")
    return files


def write_atomic_dir(path: Path, files: Mapping[str, tuple[bytes, int]], root_mode: int) -> None:
    """Lay files out as the kubelet's atomic writer does: ..<ts>/, ..data, and top-level symlinks."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(root_mode)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    payload = path / stamp
    payload.mkdir(mode=0o755)
    for relative, (content, mode) in files.items():
        target = Path(_inside(str(payload), relative))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(mode)
    data_link = path / "..data"
    if data_link.is_symlink():
        data_link.unlink()
    data_link.symlink_to(stamp)
    for top in sorted({relative.split("/", 1)[0] for relative in files}):
        link = path / top
        if not link.is_symlink():
            link.symlink_to(f"..data/{top}")


def _inside(base: str, relative: str) -> str:
    """base/relative, refusing paths that would leave base (as API validation does)."""
    joined = posixpath.normpath(posixpath.join(base, relative))
    if relative.startswith("/") or not (joined == base or joined.startswith(base.rstrip("/") + "/")):
        raise VolumeError(f"path {relative!r} must stay inside the volume")
    return joined
