"""DRA GPUs on the local nodes: the example DRA driver's kubelet plugin beside a node's kubelet.

A node group added with `dra=True` (`up --nodes ... --dra`) advertises its GPUs the way
Dynamic Resource Allocation hands them out, not as the extended resource `nvidia.com/gpu`:
each of its nodes runs, as a host process in the node's netns and cgroup like its other
daemons, `dra-example-kubeletplugin` of sigs.k8s.io/dra-example-driver v0.2.1 (built from
its Go module, localcluster/drakubeletplugin, on first use). It registers with the node's
kubelet through the kubelet's plugin registry (<kubelet root>/plugins_registry), publishes
the node's fake GPUs (`gpu-0`...) as a ResourceSlice of driver `gpu.example.com`, and, when
the kubelet prepares a pod's allocated claim, writes a CDI spec that puts the devices'
environment in the pod's containers: `GPU_DEVICE_<n>=gpu-<n>`,
`GPU_DEVICE_<n>_RESOURCE_CLAIM=<claim UID>`, `DRA_RESOURCE_DRIVER_NAME=gpu.example.com`,
`KUBERNETES_NODE_NAME` (cmd/dra-example-kubeletplugin/cdi.go, state.go).

CDI is containerd's to apply, from 1.7 on (`enable_cdi`); Debian 12's containerd, 1.6.20, has
none. So DRA nodes run containerd v1.7.36 and its runc shim, built from containerd's Go
module (localcluster/containerdruntime), with CDI on and the plugin's CDI root among its
spec directories; every other node keeps Debian's. The scheduler allocates claims and the
kubelet prepares them as on any cluster: DRA is GA and on by default from Kubernetes 1.34
(resource.k8s.io/v1), so no flag or feature gate is needed on any release here.

What the driver's Helm chart installs is installed here too, but its kubelet plugin's
DaemonSet: the DeviceClass `gpu.example.com` (templates/deviceclass.yaml) and the plugin's
ClusterRole (templates/clusterrole.yaml), bound to the one client certificate the plugins
authenticate with. The chart's ValidatingAdmissionPolicy, which keeps a plugin to its own
node's ResourceSlices, reads the node from a ServiceAccount token: a certificate carries none.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml

from localcluster import binaries, certs, kubeconfig, netsetup, processes
from localcluster.components import APISERVER_PORT
from localcluster.node import cgroups, network
from localcluster.node.config import NodePaths, NodeSpec
from localcluster.probe import ApiProbe, wait_until

log = logging.getLogger(__name__)

DRIVER = "gpu.example.com"
DEVICE_CLASS = DRIVER
DAEMON = "dra-plugin"
IDENTITY = certs.ClientIdentity("dra-example-driver", "localcluster:dra-example-driver")
ROLE = "dra-example-driver-role"
PUBLISH_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
RESOURCE_SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def manifests() -> list[dict]:
    """The DeviceClass and the plugin's RBAC, as the driver's chart has them."""
    return [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DEVICE_CLASS},
         "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ROLE},
         "rules": [
             {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
             {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
             {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
              "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": ROLE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": IDENTITY.user}]},
    ]


def install(kubectl) -> None:
    """The DeviceClass and the plugin's RBAC (idempotent); `kubectl` as Cluster.kubectl."""
    applied = kubectl("apply", "-f", "-", input=yaml.safe_dump_all(manifests()))
    if applied.returncode != 0:
        raise RuntimeError(f"installing the DRA driver's DeviceClass and RBAC: {applied.stderr.strip()}")


def plugin_command(plugin: Path, spec: NodeSpec, paths: NodePaths) -> list[str]:
    """The plugin for one node: its GPUs, the kubelet's plugin directories, the CDI root its
    containerd reads, and its own kubeconfig."""
    return [
        str(plugin),
        f"--node-name={spec.name}",
        f"--num-devices={spec.dra_gpus}",
        f"--cdi-root={paths.cdi_dir}",
        f"--kubelet-plugins-directory-path={kubelet_plugins_dir(paths)}",
        f"--kubelet-registrar-directory-path={kubelet_registry_dir(paths)}",
        f"--kubeconfig={paths.root / 'dra-plugin.kubeconfig'}",
    ]


def kubelet_plugins_dir(paths: NodePaths) -> Path:
    """Where the kubelet finds plugins' sockets (/var/lib/kubelet/plugins on a real node)."""
    return paths.kubelet_root / "plugins"


def kubelet_registry_dir(paths: NodePaths) -> Path:
    """Where the kubelet watches for plugins registering (/var/lib/kubelet/plugins_registry)."""
    return paths.kubelet_root / "plugins_registry"


def plugin_environment(spec: NodeSpec, environ: dict[str, str]) -> dict[str, str]:
    """`environ` and NODE_NAME: the plugin seeds its devices' UUIDs and the containers'
    KUBERNETES_NODE_NAME with it, not with --node-name (discovery.go, cdi.go)."""
    return {**environ, "NODE_NAME": spec.name}


def containerd() -> Path:
    """The DRA nodes' containerd (1.7, with CDI); its runc shim lies beside it."""
    return binaries.cdi_containerd() / "containerd"


def start_plugin(spec: NodeSpec, paths: NodePaths, pki_dir: Path, log_file: Path) -> None:
    """Start the node's plugin in its netns and cgroup (it reaches the apiserver on the bridge)."""
    pki = certs.Pki(pki_dir)
    certs.ensure_client(pki, IDENTITY)
    kubeconfig.write(paths.root / "dra-plugin.kubeconfig",
                     kubeconfig.render(pki, IDENTITY, f"https://{netsetup.HOST_IP}:{APISERVER_PORT}"))
    # The kubelet makes its plugin registry as it starts; the plugin must not race it there.
    for directory in (kubelet_plugins_dir(paths), kubelet_registry_dir(paths)):
        directory.mkdir(parents=True, exist_ok=True)
    argv = plugin_command(binaries.dra_plugin(), spec, paths)
    pid = processes.start_detached(["nsenter", f"--net={network.netns_path(spec)}", "--", *argv],
                                   paths.root / f"{DAEMON}.pid", log_file, cwd=paths.root,
                                   env=plugin_environment(spec, processes.environment_without_proxy()),
                                   program=argv[0])
    cgroups.join_daemons(spec.cgroup, pid)


def plugin_alive(paths: NodePaths) -> bool:
    return processes.read_pid(paths.root / f"{DAEMON}.pid") is not None


def published_devices(probe: ApiProbe, node: str) -> int:
    """How many devices of the driver the node's ResourceSlices publish."""
    response = probe.get(f"{RESOURCE_SLICES}?fieldSelector=spec.nodeName%3D{node},spec.driver%3D{DRIVER}")
    if response is None or response.status != 200:
        return 0
    return sum(len(item["spec"].get("devices") or ()) for item in response.json().get("items", []))


def wait_published(probe: ApiProbe, spec: NodeSpec, paths: NodePaths, log_file: Path) -> None:
    """Return once the node's plugin has published its GPUs (it registered with the kubelet first)."""
    def published() -> bool:
        if not plugin_alive(paths):
            raise RuntimeError(f"the DRA plugin of node {spec.name} exited; see {log_file}:\n{_tail(log_file)}")
        return published_devices(probe, spec.name) == spec.dra_gpus

    wait_until(published, PUBLISH_TIMEOUT_S, f"node {spec.name}'s DRA plugin to publish {spec.dra_gpus} GPUs")
    log.info("node %s: %d GPUs of DeviceClass %s", spec.name, spec.dra_gpus, DEVICE_CLASS)


def _tail(log_file: Path, size: int = 2000) -> str:
    try:
        with open(log_file, "rb") as stream:
            stream.seek(0, os.SEEK_END)
            stream.seek(max(0, stream.tell() - size))
            return stream.read().decode(errors="replace")
    except FileNotFoundError:
        return "(no log)"
