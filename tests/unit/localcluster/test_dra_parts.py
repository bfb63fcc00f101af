"""DRA GPUs on the local nodes, as pure parts (localcluster/localcluster/dra.py, node/config.py):
the plugin's command line and environment, the containerd config that applies its CDI specs,
and what the driver's chart would install."""

from __future__ import annotations

import tomllib
from pathlib import Path

from localcluster import dra
from localcluster.node import containerdconfig
from localcluster.node.config import NodePaths, NodeSpec

SPEC = NodeSpec(name="dra-a", index=7, gpus=0, gpu_resource="nvidia.com/gpu", hostname="dra-a", dra_gpus=4)
PATHS = NodePaths(root=Path("/run/dt/nodes/n7"), image_store=Path("/cache/node-images/n7"))


def test_the_plugin_serves_its_node_s_gpus_through_that_node_s_kubelet_and_containerd():
    assert dra.plugin_command(Path("/cache/dra/plugin"), SPEC, PATHS) == [
        "/cache/dra/plugin",
        "--node-name=dra-a",
        "--num-devices=4",
        "--cdi-root=/run/dt/nodes/n7/cdi",
        "--kubelet-plugins-directory-path=/run/dt/nodes/n7/kubelet/plugins",
        "--kubelet-registrar-directory-path=/run/dt/nodes/n7/kubelet/plugins_registry",
        "--kubeconfig=/run/dt/nodes/n7/dra-plugin.kubeconfig",
    ]


def test_the_plugin_gets_its_node_s_name_in_the_environment_too():
    assert dra.plugin_environment(SPEC, {"PATH": "/usr/bin"}) == {"PATH": "/usr/bin", "NODE_NAME": "dra-a"}


def test_a_dra_node_s_containerd_reads_the_cdi_specs_the_plugin_writes_and_nothing_else_changes():
    plain = tomllib.loads(containerdconfig.containerd_config(PATHS))
    cdi = tomllib.loads(containerdconfig.containerd_config(PATHS, cdi=True))
    cri = "io.containerd.grpc.v1.cri"
    assert {key: value for key, value in cdi["plugins"][cri].items() if key not in plain["plugins"][cri]} == {
        "enable_cdi": True, "cdi_spec_dirs": ["/run/dt/nodes/n7/cdi"]}
    cdi["plugins"][cri] = {key: value for key, value in cdi["plugins"][cri].items() if key in plain["plugins"][cri]}
    assert cdi == plain
    assert "enable_cdi" not in plain["plugins"][cri]


def test_what_the_driver_s_chart_installs_but_its_daemonset():
    device_class, role, binding = dra.manifests()
    assert device_class == {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                            "metadata": {"name": "gpu.example.com"},
                            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}}
    assert role["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                    "name": dra.IDENTITY.user}]

