"""The pod knobs on a real API server (docs/job-pods.md#pod-knobs): in a namespace whose
LimitRange gives containers a default CPU limit below --cpu-per-gpu, a job is bad input
naming --cpu-limit-per-gpu, and trains with it; that job's pods also carry an image pull
Secret, a RuntimeClass (its overhead admitted, read by the manager under rbac/), a
PriorityClass, a grace period and a node-loss toleration of their own."""

import base64
import json

import pytest
from kubernetes import client

from jobharness import SCRIPTS, TEST_NODE_LABEL, job_args, node_pool, script_volume

pytestmark = pytest.mark.cluster

# A default CPU limit below the jobs' --cpu-per-gpu (200m); the manager (100m) fits it.
LIMIT_RANGE = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "cpu-defaults"},
               "spec": {"limits": [{"type": "Container", "default": {"cpu": "150m"},
                                    "defaultRequest": {"cpu": "100m"}}]}}
OVERHEAD = {"cpu": "10m", "memory": "16Mi"}
# Credentials for a registry no image of the test comes from: pulls go on unchanged.
DOCKER_CONFIG = json.dumps({"auths": {"registry.example.invalid": {
    "auth": base64.b64encode(b"user:token").decode()}}})


def test_a_job_with_every_pod_knob_trains_where_a_limit_range_sets_a_low_cpu_limit(cluster, api_client, namespace,
                                                                                   jobs, tmp_path):
    core, node_api = client.CoreV1Api(api_client), client.NodeV1Api(api_client)
    scheduling = client.SchedulingV1Api(api_client)
    runtime_class, priority_class = f"{namespace}-runc", f"{namespace}-high"
    core.create_namespaced_limit_range(namespace, LIMIT_RANGE)
    core.create_namespaced_secret(namespace, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(DOCKER_CONFIG.encode()).decode()}})
    node_api.create_runtime_class({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                   "metadata": {"name": runtime_class}, "handler": "runc",
                                   "overhead": {"podFixed": OVERHEAD}})
    # Never preempting: other tests' pods share the cluster.
    scheduling.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                      "metadata": {"name": priority_class}, "value": 1000,
                                      "preemptionPolicy": "Never"})
    try:
        with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
                script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
            jobs.submit("nolimit", job_args(pool, claim, 2, "--cpu-per-gpu=200m"))
            jobs.submit("knobs", job_args(
                pool, claim, 2, "--cpu-per-gpu=200m", "--cpu-limit-per-gpu=300m", "--image-pull-secret=regcred",
                f"--runtime-class={runtime_class}", f"--pod-priority-class={priority_class}",
                "--termination-grace-period=45s", "--node-lost-toleration=2m"))
            assert jobs.exit_code("nolimit", timeout_s=120) == 2, jobs.report("nolimit")
            errors = [line for line in jobs.logs("nolimit").splitlines() if "error" in line.lower()]
            assert len(errors) == 1 and "--cpu-limit-per-gpu: a LimitRange of the namespace" in errors[0], errors
            assert "must be less than or equal to cpu limit of 150m" in errors[0], errors
            assert [name for name in jobs.pods() if name.startswith("nolimit-")] == []
            assert jobs.exit_code("knobs") == 0, jobs.report("knobs")
            assert "cannot read RuntimeClass" not in jobs.logs("knobs")  # rbac/ grants runtimeclasses get
            spec = jobs.pod("knobs-chief")["spec"]
            assert (spec["runtimeClassName"], spec["overhead"]) == (runtime_class, OVERHEAD)
            assert (spec["priorityClassName"], spec["priority"]) == (priority_class, 1000)
            assert spec["imagePullSecrets"] == [{"name": "regcred"}]
            assert spec["terminationGracePeriodSeconds"] == 45
            assert spec["nodeSelector"] == {TEST_NODE_LABEL: pool.prefix}
            assert spec["containers"][0]["resources"]["limits"]["cpu"] == "300m"
            node_lost = {t["key"]: t["tolerationSeconds"] for t in spec["tolerations"] if "tolerationSeconds" in t}
            assert node_lost == {"node.kubernetes.io/not-ready": 120, "node.kubernetes.io/unreachable": 120}
    finally:
        node_api.delete_runtime_class(runtime_class)
        scheduling.delete_priority_class(priority_class)
