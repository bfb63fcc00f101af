"""Volumes on the host: kubelet's atomic-writer layout, modes, claims, and mount lists."""

import base64
import os
import stat
from pathlib import Path

import pytest

from localcluster.agent.volumes import (
    Mount, VolumeContext, VolumeError, container_mounts, prepare_volumes, sort_mounts,
)


class Objects:
    def __init__(self, secrets=None, config_maps=None, claims=None, volumes=None):
        self.secrets, self.config_maps = secrets or {}, config_maps or {}
        self.claims, self.volumes = claims or {}, volumes or {}
        self.token_requests = []

    def secret(self, namespace, name):
        data = self.secrets.get(name)
        return None if data is None else {"data": {k: base64.b64encode(v).decode() for k, v in data.items()}}

    def config_map(self, namespace, name):
        data = self.config_maps.get(name)
        return None if data is None else {"data": data}

    def claim(self, namespace, name):
        return self.claims.get(name)

    def persistent_volume(self, name):
        return self.volumes.get(name)

    def service_account_token(self, pod, audience, expiration_s):
        self.token_requests.append((pod["metadata"]["name"], audience, expiration_s))
        return "jwt"


def make_pod(volumes, containers=()):
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "x"}},
            "spec": {"volumes": volumes, "containers": list(containers)}}


@pytest.fixture
def context(tmp_path):
    ca = tmp_path / "ca.crt"
    ca.write_text("CA PEM")
    return VolumeContext(pod_ip="10.233.1.2", host_ip="10.233.0.11", ca_file=ca, node_allocatable={})


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_secret_files_keep_their_modes_in_the_kubelet_layout(tmp_path, context):
    objects = Objects(secrets={"ssh": {"id_rsa": b"KEY", "authorized_keys": b"PUB"}})
    volume = {"name": "keys", "secret": {"secretName": "ssh", "defaultMode": 0o400,
                                         "items": [{"key": "id_rsa", "path": "id_rsa", "mode": 0o600},
                                                   {"key": "authorized_keys", "path": "authorized_keys"}]}}
    paths = prepare_volumes(make_pod([volume]), tmp_path / "vols", objects, context)
    root = Path(paths["keys"])
    assert (root / "id_rsa").read_bytes() == b"KEY"
    assert os.readlink(root / "id_rsa") == "..data/id_rsa"
    assert mode(root / "id_rsa") == 0o600 and mode(root / "authorized_keys") == 0o400
    assert os.stat(root / "id_rsa").st_uid == os.getuid()
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o1777
    assert mode(root / "..data") == 0o755


def test_missing_secret_waits_unless_optional(tmp_path, context):
    with pytest.raises(VolumeError, match='secret "nope" not found'):
        prepare_volumes(make_pod([{"name": "s", "secret": {"secretName": "nope"}}]), tmp_path, Objects(), context)
    paths = prepare_volumes(make_pod([{"name": "s", "secret": {"secretName": "nope", "optional": True}}]),
                            tmp_path, Objects(), context)
    assert os.listdir(paths["s"]) == ["..data"] or sorted(os.listdir(paths["s"]))[0].startswith("..")


def test_service_account_projection_gets_token_ca_and_namespace(tmp_path, context):
    volume = {"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]}}
    objects = Objects()
    root = Path(prepare_volumes(make_pod([volume]), tmp_path, objects, context)["kube-api-access-x"])
    assert (root / "token").read_text() == "jwt"
    assert (root / "ca.crt").read_text() == "CA PEM"  # the root CA publisher had not run yet
    assert (root / "namespace").read_text() == "ns"
    assert objects.token_requests == [("p", None, 3607)]


def test_claim_resolves_to_the_bound_host_path(tmp_path, context):
    data = tmp_path / "data"
    objects = Objects(
        claims={"shared": {"spec": {"volumeName": "pv1"}, "status": {"phase": "Bound"}},
                "pending": {"spec": {}, "status": {"phase": "Pending"}}},
        volumes={"pv1": {"spec": {"hostPath": {"path": str(data), "type": "DirectoryOrCreate"}}}},
    )
    paths = prepare_volumes(make_pod([{"name": "d", "persistentVolumeClaim": {"claimName": "shared"}}]),
                            tmp_path, objects, context)
    assert paths["d"] == str(data) and data.is_dir()
    with pytest.raises(VolumeError, match="not bound"):
        prepare_volumes(make_pod([{"name": "d", "persistentVolumeClaim": {"claimName": "pending"}}]),
                        tmp_path, objects, context)


def test_host_path_type_checks(tmp_path, context):
    missing = str(tmp_path / "missing")
    with pytest.raises(VolumeError, match="type check failed"):
        prepare_volumes(make_pod([{"name": "h", "hostPath": {"path": missing, "type": "Directory"}}]),
                        tmp_path, Objects(), context)
    created = prepare_volumes(make_pod([{"name": "h", "hostPath": {"path": missing}}]), tmp_path, Objects(), context)
    assert Path(created["h"]).is_dir()


def test_container_mounts_honour_read_only_sub_path_and_order(tmp_path):
    pod = make_pod([{"name": "cfg", "configMap": {"name": "c"}}, {"name": "work", "emptyDir": {}}])
    container = {"name": "main", "volumeMounts": [
        {"name": "cfg", "mountPath": "/data/conf"},
        {"name": "work", "mountPath": "/data/", "subPath": "run1"},
    ]}
    paths = {"cfg": str(tmp_path / "cfg"), "work": str(tmp_path / "work")}
    mounts = sort_mounts(container_mounts(pod, container, paths))
    assert mounts == [
        Mount(source=str(tmp_path / "work" / "run1"), target="/data", readonly=False),
        Mount(source=str(tmp_path / "cfg"), target="/data/conf", readonly=True),
    ]
    assert (tmp_path / "work" / "run1").is_dir()


def test_sub_path_may_not_escape(tmp_path):
    pod = make_pod([{"name": "work", "emptyDir": {}}])
    container = {"name": "main", "volumeMounts": [{"name": "work", "mountPath": "/x", "subPath": "../etc"}]}
    with pytest.raises(VolumeError, match="inside the volume"):
        container_mounts(pod, container, {"work": str(tmp_path)})
