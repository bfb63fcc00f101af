"""A container's environment and command line, resolved as the kubelet does.

Order and precedence follow kubelet_pods.go makeEnvironmentVariables: envFrom
sources in order, then env entries in order (values may reference earlier ones
with `$(NAME)`), then the `kubernetes` service variables for names not set by
the spec. The runtime puts the image's ENV (PATH among it), HOME and HOSTNAME
underneath, as containerd does.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from localcluster.agent.expansion import expand, mapping_for
from localcluster.agent.quantity import divide_round_up, parse_quantity

_ENV_NAME_RE = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_SUBSCRIPT_RE = re.compile(r"^(metadata\.(?:labels|annotations))\['(.*)'\]$")


class ContainerConfigError(Exception):
    """The spec refers to something missing; the kubelet reports CreateContainerConfigError and retries."""


class ObjectSource(Protocol):
    """Reads the Secrets and ConfigMaps a pod refers to; None when not found."""

    def secret(self, namespace: str, name: str) -> dict | None: ...

    def config_map(self, namespace: str, name: str) -> dict | None: ...


@dataclass(frozen=True)
class PodContext:
    """What a container's environment may refer to beyond its own spec."""

    pod: dict
    pod_ip: str
    host_ip: str
    hostname: str
    apiserver_host: str
    apiserver_port: int
    node_allocatable: Mapping[str, str]


def service_env(apiserver_host: str, apiserver_port: int) -> dict[str, str]:
    """The variables of the `kubernetes` service, pointing straight at the apiserver."""
    address = f"tcp://{apiserver_host}:{apiserver_port}"
    prefix = f"KUBERNETES_PORT_{apiserver_port}_TCP"
    return {
        "KUBERNETES_SERVICE_HOST": apiserver_host,
        "KUBERNETES_SERVICE_PORT": str(apiserver_port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(apiserver_port),
        "KUBERNETES_PORT": address,
        prefix: address,
        f"{prefix}_PROTO": "tcp",
        f"{prefix}_PORT": str(apiserver_port),
        f"{prefix}_ADDR": apiserver_host,
    }


def kubelet_env(container: dict, context: PodContext, source: ObjectSource) -> dict[str, str]:
    """The variables the kubelet passes to the runtime (what `$(NAME)` in command/args sees)."""
    namespace = context.pod["metadata"]["namespace"]
    services = service_env(context.apiserver_host, context.apiserver_port)
    env: dict[str, str] = {}
    for env_from in container.get("envFrom") or []:
        env.update(_env_from(env_from, namespace, source))
    mapping = mapping_for(env, services)
    for var in container.get("env") or []:
        name = var["name"]
        if var.get("value"):
            env[name] = expand(var["value"], mapping)
        elif var.get("valueFrom"):
            value = _value_from(var["valueFrom"], container, context, source, namespace)
            if value is None:
                continue
            env[name] = value
        else:
            env[name] = ""
    for name, value in services.items():
        env.setdefault(name, value)
    return env


def field_value(pod: dict, field_path: str, pod_ip: str, host_ip: str) -> str:
    """A downward API fieldRef, formatted as the kubelet formats it."""
    metadata = pod["metadata"]
    subscript = _SUBSCRIPT_RE.match(field_path)
    if subscript:
        mapping = metadata.get(subscript.group(1).split(".")[1]) or {}
        return mapping.get(subscript.group(2), "")
    simple = {
        "metadata.name": lambda: metadata["name"],
        "metadata.namespace": lambda: metadata["namespace"],
        "metadata.uid": lambda: metadata["uid"],
        "metadata.labels": lambda: format_map(metadata.get("labels") or {}),
        "metadata.annotations": lambda: format_map(metadata.get("annotations") or {}),
        "spec.nodeName": lambda: pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": lambda: pod["spec"].get("serviceAccountName", ""),
        "status.hostIP": lambda: host_ip,
        "status.hostIPs": lambda: host_ip,
        "status.podIP": lambda: pod_ip,
        "status.podIPs": lambda: pod_ip,
    }
    if field_path not in simple:
        raise ContainerConfigError(f"unsupported fieldRef fieldPath {field_path!r}")
    return simple[field_path]()


def format_map(mapping: Mapping[str, str]) -> str:
    """Labels/annotations as the downward API writes them: sorted `key="value"` lines."""
    return "\n".join(f"{key}={json.dumps(mapping[key])}" for key in sorted(mapping))


def resource_value(pod: dict, resource_ref: dict, default_container: str, node_allocatable: Mapping[str, str]) -> str:
    """A downward API resourceFieldRef: limits fall back to node allocatable, as in the kubelet."""
    container_name = resource_ref.get("containerName") or default_container
    containers = (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]
    container = next((c for c in containers if c["name"] == container_name), None)
    if container is None:
        raise ContainerConfigError(f"resourceFieldRef refers to unknown container {container_name!r}")
    kind, _, resource = resource_ref["resource"].partition(".")
    resources = container.get("resources") or {}
    quantity = (resources.get(kind) or {}).get(resource)
    if quantity is None and kind == "limits":
        quantity = node_allocatable.get(resource)
    divisor = parse_quantity(resource_ref.get("divisor") or "1")
    return str(divide_round_up(parse_quantity(quantity or "0"), divisor))


def _env_from(env_from: dict, namespace: str, source: ObjectSource) -> dict[str, str]:
    prefix = env_from.get("prefix", "")
    if "configMapRef" in env_from:
        ref = env_from["configMapRef"]
        obj = source.config_map(namespace, ref["name"])
        data = (obj or {}).get("data") or {}
    else:
        ref = env_from["secretRef"]
        obj = source.secret(namespace, ref["name"])
        data = {key: _decode(value) for key, value in ((obj or {}).get("data") or {}).items()}
    if obj is None:
        if ref.get("optional"):
            return {}
        kind = "configmap" if "configMapRef" in env_from else "secret"
        raise ContainerConfigError(f'{kind} "{ref["name"]}" not found')
    return {prefix + key: value for key, value in data.items() if _ENV_NAME_RE.match(prefix + key)}


def _value_from(
    value_from: dict, container: dict, context: PodContext, source: ObjectSource, namespace: str
) -> str | None:
    """One env valueFrom; None when an optional source is missing (the variable is skipped)."""
    if "fieldRef" in value_from:
        return field_value(context.pod, value_from["fieldRef"]["fieldPath"], context.pod_ip, context.host_ip)
    if "resourceFieldRef" in value_from:
        return resource_value(context.pod, value_from["resourceFieldRef"], container["name"], context.node_allocatable)
    if "configMapKeyRef" in value_from:
        ref, kind = value_from["configMapKeyRef"], "configmap"
        obj = source.config_map(namespace, ref["name"])
        data = (obj or {}).get("data") or {}
    else:
        ref, kind = value_from["secretKeyRef"], "secret"
        obj = source.secret(namespace, ref["name"])
        data = {key: _decode(value) for key, value in ((obj or {}).get("data") or {}).items()}
    if obj is None:
        if ref.get("optional"):
            return None
        raise ContainerConfigError(f'{kind} "{ref["name"]}" not found')
    if ref["key"] not in data:
        if ref.get("optional"):
            return None
        raise ContainerConfigError(f'couldn\'t find key {ref["key"]} in {kind} {namespace}/{ref["name"]}')
    return data[ref["key"]]


def _decode(value: str) -> str:
    return base64.b64decode(value).decode("utf-8", errors="replace")
