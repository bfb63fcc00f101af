"""DRA GPUs on the local cluster (localcluster/localcluster/dra.py): a node group added with
`dra=True` runs the example DRA driver's kubelet plugin beside each kubelet. The plugin
publishes the node's GPUs as a ResourceSlice of DeviceClass gpu.example.com (and no
nvidia.com/gpu); the real scheduler allocates a pod's claim from it, the kubelet has the
plugin prepare it, and the node's containerd applies the plugin's CDI spec, so the container
sees exactly its devices; the claim goes with the pod."""

from __future__ import annotations

import re
import uuid

import pytest
from kubernetes import client

from harness.polling import poll_until
from roughness import create_pod, read_pod

pytestmark = pytest.mark.cluster

GROUP, VERSION = "resource.k8s.io", "v1"
DEVICE_CLASS = "gpu.example.com"
IMAGE = "distributetrain/base:0.1.0"
POD_TIMEOUT_S = 120
CLAIM_GONE_TIMEOUT_S = 60
DEVICE_ENV = re.compile(r"^GPU_DEVICE_(\d+)=(gpu-\d+)$")


def claim_template(name: str, count: int) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpus", "exactly": {"deviceClassName": DEVICE_CLASS, "count": count}}]}}}}


def pod_with_claim(name: str, template: str, selector: dict[str, str]) -> dict:
    """A pod whose one container prints what the driver's CDI spec put in its environment, then
    waits: a generated claim is deleted as soon as its pod has ended."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "nodeSelector": selector, "terminationGracePeriodSeconds": 0,
                     "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
                     "containers": [{"name": "main", "image": IMAGE, "resources": {"claims": [{"name": "gpus"}]},
                                     "command": ["sh", "-c", "env | grep -E '^(GPU_DEVICE_|DRA_RESOURCE_DRIVER_NAME=)'"
                                                             " | sort; echo done; exec sleep 600"]}]}}


def test_a_dra_node_publishes_its_gpus_and_a_pod_s_claim_gets_two_of_them_until_the_pod_goes(
        cluster, api_client, namespace):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    node, label = f"dra-{uuid.uuid4().hex[:6]}", {"distributetrain.test/dra": uuid.uuid4().hex[:8]}
    with cluster.add_nodes({node: 4}, labels=label, dra=True):
        slices = custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices",
                                                   field_selector=f"spec.nodeName={node}")["items"]
        assert [(s["spec"]["driver"], sorted(d["name"] for d in s["spec"]["devices"])) for s in slices] == [
            (DEVICE_CLASS, ["gpu-0", "gpu-1", "gpu-2", "gpu-3"])]
        assert "nvidia.com/gpu" not in core.read_node(node).status.allocatable

        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaimtemplates",
                                               claim_template("two-gpus", 2))
        create_pod(core, namespace, pod_with_claim("uses-gpus", "two-gpus", label))
        running = poll_until(lambda: (pod := read_pod(core, namespace, "uses-gpus"))["status"].get("phase") != "Pending"
                             and pod, POD_TIMEOUT_S,
                             lambda: f"the pod with a claim to start: {read_pod(core, namespace, 'uses-gpus')}")
        environment = poll_until(
            lambda: "done" in (lines := core.read_namespaced_pod_log("uses-gpus", namespace).splitlines()) and lines,
            POD_TIMEOUT_S, "the pod with a claim to print its devices")
        assert (running["status"]["phase"], running["spec"]["nodeName"]) == ("Running", node)

        [claim_name] = [status["resourceClaimName"] for status in running["status"]["resourceClaimStatuses"]]
        claim = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", claim_name)
        allocated = claim["status"]["allocation"]["devices"]["results"]
        assert sorted((r["driver"], r["pool"]) for r in allocated) == [(DEVICE_CLASS, node)] * 2
        assert [consumer["name"] for consumer in claim["status"]["reservedFor"]] == ["uses-gpus"]
        devices = [m.group(2) for m in map(DEVICE_ENV.match, environment) if m]
        assert sorted(devices) == sorted(r["device"] for r in allocated)
        assert f"DRA_RESOURCE_DRIVER_NAME={DEVICE_CLASS}" in environment
        assert {line.split("=", 1)[1] for line in environment if "_RESOURCE_CLAIM=" in line} == {
            claim["metadata"]["uid"]}

        core.delete_namespaced_pod("uses-gpus", namespace)
        poll_until(lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                    "resourceclaims")["items"],
                   CLAIM_GONE_TIMEOUT_S, "the pod's claim to be deleted with the pod")
