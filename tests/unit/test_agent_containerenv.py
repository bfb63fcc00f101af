"""Container environment and command line, resolved as the kubelet resolves them."""

import base64

import pytest

from localcluster.agent.containerenv import (
    ContainerConfigError, PodContext, field_value, format_map, kubelet_env,
    resource_value,
)

ALLOCATABLE = {"cpu": "64", "memory": "256Gi"}


class Objects:
    def __init__(self, secrets=None, config_maps=None):
        self.secrets = secrets or {}
        self.config_maps = config_maps or {}

    def secret(self, namespace, name):
        data = self.secrets.get(name)
        return None if data is None else {"data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}

    def config_map(self, namespace, name):
        data = self.config_maps.get(name)
        return None if data is None else {"data": data}


def make_pod(containers, **spec):
    return {
        "metadata": {"name": "job-worker-0", "namespace": "team", "uid": "u-1",
                     "labels": {"b": "2", "a": "1"}, "annotations": {"note": 'say "hi"'}},
        "spec": {"containers": containers, "nodeName": "gpu-a", "serviceAccountName": "runner", **spec},
    }


def context_for(pod):
    return PodContext(pod=pod, pod_ip="10.233.1.2", host_ip="10.233.0.11", hostname="job-worker-0",
                      apiserver_host="10.233.0.1", apiserver_port=6443,
                      node_allocatable=ALLOCATABLE)


def test_env_in_kubelet_order_with_references_and_service_variables():
    container = {
        "name": "main",
        "envFrom": [{"configMapRef": {"name": "settings"}}, {"secretRef": {"name": "creds"}, "prefix": "S_"}],
        "env": [
            {"name": "PORT", "value": "12345"},
            {"name": "ADDR", "value": "$(POD_IP):$(PORT)"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "LATE", "value": "$(POD_IP)"},
            {"name": "API", "value": "$(KUBERNETES_SERVICE_HOST)"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
            {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "missing", "key": "x", "optional": True}}},
            {"name": "EMPTY"},
        ],
    }
    pod = make_pod([container])
    objects = Objects(secrets={"creds": {"token": "t0k", "bad key": "x"}}, config_maps={"settings": {"mode": "fast"}})
    env = kubelet_env(container, context_for(pod), objects)
    assert env["ADDR"] == "$(POD_IP):12345"  # POD_IP is defined after ADDR
    assert env["LATE"] == "10.233.1.2"
    assert env["API"] == "10.233.0.1"
    assert env["S_token"] == "t0k" and "S_bad key" not in env
    assert env["TOKEN"] == "t0k" and env["MODE"] == "fast" and env["EMPTY"] == ""
    assert "GONE" not in env
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert env["KUBERNETES_PORT_6443_TCP_ADDR"] == "10.233.0.1"


def test_spec_overrides_service_variables():
    container = {"name": "main", "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": "x"},
                                          {"name": "PATH", "value": "/only"}]}
    pod = make_pod([container])
    env = kubelet_env(container, context_for(pod), Objects())
    assert env["KUBERNETES_SERVICE_HOST"] == "x"
    assert env["PATH"] == "/only"


def test_missing_secret_is_a_config_error():
    container = {"name": "main", "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]}
    with pytest.raises(ContainerConfigError, match='secret "nope" not found'):
        kubelet_env(container, context_for(make_pod([container])), Objects())


def test_missing_key_is_a_config_error():
    container = {"name": "main", "env": [{"name": "T", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]}
    with pytest.raises(ContainerConfigError, match="couldn't find key k"):
        kubelet_env(container, context_for(make_pod([container])), Objects(config_maps={"c": {}}))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("metadata.name", "job-worker-0"),
        ("metadata.namespace", "team"),
        ("metadata.uid", "u-1"),
        ("metadata.labels['a']", "1"),
        ("metadata.annotations['missing']", ""),
        ("spec.nodeName", "gpu-a"),
        ("spec.serviceAccountName", "runner"),
        ("status.podIP", "10.233.1.2"),
        ("status.hostIP", "10.233.0.11"),
        ("metadata.labels", 'a="1"\nb="2"'),
    ],
)
def test_field_refs(path, expected):
    assert field_value(make_pod([]), path, "10.233.1.2", "10.233.0.11") == expected


def test_format_map_quotes_values():
    assert format_map({"note": 'say "hi"'}) == 'note="say \\"hi\\""'


def test_resource_refs_round_up_and_default_limits_to_allocatable():
    container = {"name": "main", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"cpu": "1500m"}}}
    pod = make_pod([container])
    assert resource_value(pod, {"resource": "limits.cpu"}, "main", ALLOCATABLE) == "2"
    assert resource_value(pod, {"resource": "requests.cpu", "divisor": "1m"}, "main", ALLOCATABLE) == "250"
    assert resource_value(pod, {"resource": "requests.memory", "divisor": "1Mi"}, "main", ALLOCATABLE) == "1024"
    assert resource_value(pod, {"resource": "limits.memory", "divisor": "1Gi"}, "main", ALLOCATABLE) == "256"
