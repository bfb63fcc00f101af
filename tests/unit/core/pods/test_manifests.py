"""Manifest builders, compared as whole objects."""

from hypothesis import given, strategies as st

from distributetrain.core.pods import manifests, podgroup
from distributetrain.core import quantity
from distributetrain.core.settings import JobSettings, PvcMount
from distributetrain.core.pods.sshkeys import JobKeys, keypair_from_seed

KEYS = JobKeys(client=keypair_from_seed(b"c" * 32, "distributetrain-demo"),
               host=keypair_from_seed(b"h" * 32, "distributetrain-demo-host"))
SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=6, image="reg.example.com/base:1", owner_uid="uid-1",
                       discovery_url="http://10.0.0.9:8470/hosts")
OWNER = [{"apiVersion": "v1", "kind": "Pod", "name": "demo", "uid": "uid-1"}]
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# A pod on a node that stops answering is evicted after 30 s, not Kubernetes' 300 s.
# Neither the cluster autoscaler nor Karpenter evicts a job pod to scale down or replace its node.
NO_DISRUPTION = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false", "karpenter.sh/do-not-disrupt": "true"}
NODE_LOST = [{"key": f"node.kubernetes.io/{why}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
             for why in ("not-ready", "unreachable")]


# PodSecurity `restricted`: the job's non-root user (base_image/Dockerfile makes it), whose
# group reads the SSH files; no capability, no escalation, the runtime's seccomp profile.
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
# Everything the pod scripts write (and /tmp of the training script): an emptyDir, so a
# read-only root filesystem breaks none of it.
SCRATCH = {"name": "tmp", "emptyDir": {}}
SCRATCH_MOUNT = {"name": "tmp", "mountPath": "/tmp"}
# No mesh sidecar unless --mesh-injection: SSH and Gloo between pod IPs are not mesh traffic.
NO_MESH = {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}


def labels(role, **extra):
    return {"app.kubernetes.io/name": "distributetrain", "app.kubernetes.io/managed-by": "distributetrain",
            "distributetrain.io/job": "demo", "distributetrain.io/role": role,
            "distributetrain.io/owner-uid": "uid-1", **extra}


def pinned(node):
    # By the Node's name, as the DaemonSet controller pins: its kubernetes.io/hostname
    # label may differ (EKS with Karpenter, kops), and the inventory knows nodes by name.
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}


def test_secret():
    host_public = KEYS.host.public_openssh.rsplit(" ", 1)[0]
    assert manifests.ssh_secret(SETTINGS, KEYS) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "demo-ssh", "namespace": "ml", "labels": labels("ssh"), "ownerReferences": OWNER},
        "type": "Opaque",
        "stringData": {
            "id_ed25519": KEYS.client.private_openssh,
            "authorized_keys": KEYS.client.public_openssh + "\n",
            "ssh_host_ed25519_key": KEYS.host.private_openssh,
            "known_hosts": f"* {host_public}\n",
            "config": manifests.SSH_CLIENT_CONFIG,
        },
    }


def test_worker():
    assert manifests.worker_pod(SETTINGS, 0, "gpu-a", 5) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "demo-worker-0",
            "namespace": "ml",
            "labels": labels("worker", **{"distributetrain.io/worker-index": "0"}),
            "ownerReferences": OWNER,
            "annotations": {"distributetrain.io/gpus": "5", **NO_DISRUPTION, **NO_MESH},
        },
        "spec": {
            "restartPolicy": "Never",
            "affinity": pinned("gpu-a"),
            "securityContext": POD_SECURITY,
            "containers": [{
                "name": "worker",
                "image": "reg.example.com/base:1",
                "args": ["/bin/sh", "-c", manifests.WORKER_SCRIPT],
                "env": [{"name": "DT_PORT", "value": "12345"},
                        {"name": "DT_MANAGER_URL", "value": "http://10.0.0.9:8470/hosts"},
                        {"name": "DT_ORPHAN_AFTER_S", "value": "300"},
                        {"name": "DT_ORPHAN_CHECK_S", "value": "30"}],
                "ports": [{"name": "ssh", "containerPort": 12345, "protocol": "TCP"}],
                "readinessProbe": {"tcpSocket": {"port": 12345}, "periodSeconds": 1, "failureThreshold": 3},
                "resources": {"requests": {"cpu": "10", "memory": "40Gi"},
                              "limits": {"nvidia.com/gpu": "5", "memory": "40Gi"}},
                "securityContext": CONTAINER_SECURITY,
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": [{"name": "ssh", "mountPath": "/etc/distributetrain/ssh", "readOnly": True},
                                 {"name": "dshm", "mountPath": "/dev/shm"}, SCRATCH_MOUNT],
            }],
            "volumes": [{"name": "ssh", "secret": {"secretName": "demo-ssh", "defaultMode": 0o440, "items": [
                {"key": "authorized_keys", "path": "authorized_keys"},
                {"key": "ssh_host_ed25519_key", "path": "ssh_host_ed25519_key"}]}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "40Gi"}}, SCRATCH],
            "terminationGracePeriodSeconds": 10,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "tolerations": [GPU_TOLERATION, *NODE_LOST],
        },
    }


def test_chief():
    settings = SETTINGS.replace(script_args=("--epochs", "3"), env=(("SEED", "7"),), filename="/train/train.py")
    assert manifests.chief_pod(settings, "gpu-c", 1) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "demo-chief", "namespace": "ml", "labels": labels("chief"), "ownerReferences": OWNER,
                     "annotations": {"distributetrain.io/gpus": "1", **NO_DISRUPTION, **NO_MESH}},
        "spec": {
            "restartPolicy": "Never",
            "affinity": pinned("gpu-c"),
            "securityContext": POD_SECURITY,
            "containers": [{
                "name": "chief",
                "image": "reg.example.com/base:1",
                "args": ["/bin/sh", "-c", manifests.CHIEF_SCRIPT, "distributetrain-chief", "--epochs", "3"],
                "env": [
                    {"name": "DT_CHIEF_ADDRESS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "DT_CHIEF_SLOTS", "value": "1"},
                    {"name": "DT_HOSTS_URL", "value": "http://10.0.0.9:8470/hosts"},
                    # The manager's longest start: 300 s ready, 900 s for a new node, 1800 s pulling, 60 s more.
                    {"name": "DT_HOSTS_WAIT_S", "value": "3060"},
                    {"name": "DT_NUM_PROCS", "value": "6"},
                    {"name": "DT_PORT", "value": "12345"},
                    {"name": "DT_FILENAME", "value": "/train/train.py"},
                    {"name": "DT_SSH_ATTEMPTS", "value": "30"},
                    {"name": "DT_SAME_INTERFACES", "value": "true"},
                    {"name": "DT_GLOO_TIMEOUT", "value": "120"},
                    {"name": "SEED", "value": "7"},
                ],
                "resources": {"requests": {"cpu": "2", "memory": "8Gi"},
                              "limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}},
                "securityContext": CONTAINER_SECURITY,
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": [{"name": "ssh", "mountPath": "/etc/distributetrain/ssh-client", "readOnly": True},
                                 {"name": "dshm", "mountPath": "/dev/shm"}, SCRATCH_MOUNT],
            }],
            "volumes": [{"name": "ssh", "secret": {"secretName": "demo-ssh", "defaultMode": 0o440, "items": [
                {"key": "id_ed25519", "path": "id_ed25519"}, {"key": "known_hosts", "path": "known_hosts"},
                {"key": "config", "path": "config"}]}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}, SCRATCH],
            "terminationGracePeriodSeconds": 10,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "tolerations": [GPU_TOLERATION, *NODE_LOST],
        },
    }


def test_secrets_are_the_chiefs_environment_and_only_its():
    # horovodrun forwards the chief's environment to every rank; workers run only sshd.
    objects = manifests.job_objects(SETTINGS.replace(env_from_secrets=("s3-creds", "wandb")),
                                    [("gpu-a", 5), ("gpu-c", 1)], KEYS)
    worker, chief = (obj["spec"]["containers"][0] for obj in objects[1:])
    assert chief["envFrom"] == [{"secretRef": {"name": "s3-creds"}}, {"secretRef": {"name": "wandb"}}]
    # env still wins over a Secret's key of the same name (Kubernetes' rule), so no Secret can
    # change the job's own DT_ variables.
    assert chief["env"] == manifests.chief_pod(SETTINGS, "gpu-c", 1)["spec"]["containers"][0]["env"]
    assert "envFrom" not in worker
    assert "envFrom" not in manifests.chief_pod(SETTINGS, "gpu-c", 1)["spec"]["containers"][0]


def test_the_chief_puts_its_strict_ssh_first_on_path_before_any_ssh():
    # tests/e2e/test_ssh_host_keys.py proves what the script does, with the real ssh and sshd.
    script = manifests.CHIEF_SCRIPT
    assert script.index(manifests.SSH_WRAPPER_SCRIPT) < min(script.index("until ssh "), script.index("exec horovodrun"))
    assert ('exec \'$real_ssh\' -F /etc/distributetrain/ssh-client/config -o StrictHostKeyChecking=yes "\\$@"'
            in manifests.SSH_WRAPPER_SCRIPT)


def test_host_network_declares_the_host_port():
    worker = manifests.worker_pod(SETTINGS.replace(host_network=True, port=23456), 1, "gpu-b", 2)
    spec = worker["spec"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["containers"][0]["ports"] == [{"name": "ssh", "containerPort": 23456, "protocol": "TCP",
                                               "hostPort": 23456}]


def test_pvcs_tolerations_deadline_and_service_account():
    settings = SETTINGS.replace(
        pvcs=(PvcMount("train-data", "/train"), PvcMount("ref", "/ref", True)),
        tolerations=({"key": "gpu", "operator": "Exists"},),
        active_deadline_s=3600.0,
        service_account="trainer",
    )
    spec = manifests.worker_pod(settings, 0, "n", 1)["spec"]
    assert spec["volumes"][3:] == [
        {"name": "data-0", "persistentVolumeClaim": {"claimName": "train-data", "readOnly": False}},
        {"name": "data-1", "persistentVolumeClaim": {"claimName": "ref", "readOnly": True}},
    ]
    assert spec["containers"][0]["volumeMounts"][3:] == [
        {"name": "data-0", "mountPath": "/train", "readOnly": False},
        {"name": "data-1", "mountPath": "/ref", "readOnly": True},
    ]
    assert spec["tolerations"] == [GPU_TOLERATION, *NODE_LOST, {"key": "gpu", "operator": "Exists"}]
    assert spec["activeDeadlineSeconds"] == 3600
    assert spec["serviceAccountName"] == "trainer" and "automountServiceAccountToken" not in spec


def test_no_owner_outside_a_manager_pod():
    assert "ownerReferences" not in manifests.ssh_secret(SETTINGS.replace(owner_uid=""), KEYS)["metadata"]


@given(st.floats(min_value=1, max_value=10**6))
def test_a_worker_checks_on_its_manager_a_few_times_per_orphan_timeout(timeout_s):
    check_s = manifests.orphan_check_s(timeout_s)
    assert 1 <= check_s <= manifests.ORPHAN_CHECK_MAX_S
    assert check_s <= max(1, timeout_s / 2)  # at least twice within the timeout (but never more than once a second)


def test_job_objects_in_creation_order_with_chief_last():
    objects = manifests.job_objects(SETTINGS, [("gpu-a", 5), ("gpu-b", 3), ("gpu-c", 2)], KEYS)
    assert [o["metadata"]["name"] for o in objects] == ["demo-ssh", "demo-worker-0", "demo-worker-1", "demo-chief"]
    chief_env = {e["name"]: e.get("value") for e in objects[-1]["spec"]["containers"][0]["env"]}
    # The chief holds its GPUs from the start and asks the manager for the workers.
    assert chief_env["DT_HOSTS_URL"] == SETTINGS.discovery_url and chief_env["DT_CHIEF_SLOTS"] == "2"


def test_in_another_namespace_the_owner_is_a_label():
    """Owner references cannot cross namespaces; the owner's UID label is what tells this
    manager's objects from those of an earlier run of the same job name."""
    elsewhere = SETTINGS.replace(namespace="team-b", manager_namespace="ml")
    for obj in manifests.job_objects(elsewhere, [("a", 1), ("b", 1)], KEYS):
        assert "ownerReferences" not in obj["metadata"]
        assert obj["metadata"]["labels"]["distributetrain.io/owner-uid"] == "uid-1"


def test_private_keys_only_in_the_secret():
    objects = manifests.job_objects(SETTINGS, [("a", 1), ("b", 1)], KEYS)
    for pod in objects[1:]:
        assert "PRIVATE KEY" not in str(pod)


def test_job_pods_tolerate_the_taint_of_their_gpu_resource_once():
    settings = SETTINGS.replace(gpu_resource="amd.com/gpu",
                                tolerations=({"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"},))
    amd = {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    for pod in manifests.job_objects(settings, [("a", 1), ("b", 1)], KEYS)[1:]:
        assert pod["spec"]["tolerations"] == [amd, *NODE_LOST]


@given(st.integers(1, 16), st.integers(1, 64_000), st.integers(64, 1 << 20))
def test_cpu_and_memory_are_per_gpu_times_the_pod_s_share_and_memory_is_limited(share, cpu_m, memory_mi):
    settings = SETTINGS.replace(cpu_per_gpu_m=cpu_m, memory_per_gpu_bytes=memory_mi * quantity.MIB)
    for pod in (manifests.worker_pod(settings, 0, "a", share), manifests.chief_pod(settings, "a", share)):
        resources = pod["spec"]["containers"][0]["resources"]
        assert quantity.cpu_millis(resources["requests"]["cpu"]) == cpu_m * share
        assert quantity.memory_bytes(resources["requests"]["memory"]) == memory_mi * quantity.MIB * share
        assert resources["limits"] == {"nvidia.com/gpu": str(share), "memory": resources["requests"]["memory"]}


def test_custom_cpu_and_memory_per_gpu():
    settings = SETTINGS.replace(cpu_per_gpu_m=1500, memory_per_gpu_bytes=20 * 10**9)
    assert manifests.worker_pod(settings, 0, "a", 3)["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "4500m", "memory": "60G"}, "limits": {"nvidia.com/gpu": "3", "memory": "60G"}}


def test_shm_is_the_pod_s_memory_limit_unless_set():
    def shm(pod):
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "dshm")
        mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "dshm")
        assert mount == {"name": "dshm", "mountPath": "/dev/shm"}
        assert volume["emptyDir"]["medium"] == "Memory"
        return volume["emptyDir"]["sizeLimit"]

    assert shm(manifests.worker_pod(SETTINGS, 0, "a", 3)) == "24Gi"
    assert shm(manifests.chief_pod(SETTINGS.replace(memory_per_gpu_bytes=2**30), "a", 2)) == "2Gi"
    fixed = SETTINGS.replace(shm_size_bytes=512 * quantity.MIB)
    assert shm(manifests.worker_pod(fixed, 0, "a", 3)) == shm(manifests.chief_pod(fixed, "a", 1)) == "512Mi"


def test_job_pods_keep_the_image_s_entrypoint():
    for pod in manifests.job_objects(SETTINGS, [("a", 1), ("b", 1)], KEYS)[1:]:
        container = pod["spec"]["containers"][0]
        assert "command" not in container and container["args"][:2] == ["/bin/sh", "-c"]


def test_worker_sshd_ignores_the_image_s_config_and_forwards_nothing():
    assert '-f /dev/null' in manifests.WORKER_SCRIPT
    options = dict(option.split("=", 1) for option in manifests.SSHD_OPTIONS)
    assert options["DisableForwarding"] == "yes"
    for kind in ("AllowTcpForwarding", "AllowAgentForwarding", "AllowStreamLocalForwarding", "PermitTunnel",
                 "X11Forwarding", "PasswordAuthentication", "KbdInteractiveAuthentication", "PermitUserEnvironment"):
        assert options[kind] == "no", kind
    assert all(f"-o {option}" in manifests.WORKER_SCRIPT for option in manifests.SSHD_OPTIONS)


def test_every_job_pod_queued_or_not_keeps_its_node_from_consolidation():
    queued_plan = [(None, 2), (None, 1)]
    for plan in ([("gpu-a", 2), ("gpu-b", 1)], queued_plan):
        _, *pods = manifests.job_objects(SETTINGS.replace(num_gpus=3), plan, KEYS, attempt=2)
        assert [pod["metadata"]["annotations"] for pod in pods] == [
            {"distributetrain.io/gpus": "2", **NO_DISRUPTION, **NO_MESH},
            {"distributetrain.io/gpus": "1", **NO_DISRUPTION, **NO_MESH}]


def test_mesh_injection_is_opt_in():
    for settings, expected in ((SETTINGS, NO_MESH), (SETTINGS.replace(mesh_injection=True), {})):
        for pod in manifests.job_objects(settings, [("a", 1), ("b", 1)], KEYS)[1:]:
            assert pod["metadata"]["annotations"] == {"distributetrain.io/gpus": "1", **NO_DISRUPTION, **expected}


def test_job_pods_run_as_the_job_user_with_its_ssh_files_readable_by_it_alone():
    for pod in manifests.job_objects(SETTINGS.replace(host_network=True, port=23456), [("a", 1), ("b", 1)], KEYS)[1:]:
        assert pod["spec"]["securityContext"] == POD_SECURITY
        assert pod["spec"]["containers"][0]["securityContext"] == CONTAINER_SECURITY
        ssh = next(v for v in pod["spec"]["volumes"] if v["name"] == "ssh")
        assert ssh["secret"]["defaultMode"] & 0o077 == 0o040  # the user's group reads, no one else


# Every pod knob set (docs/job-pods.md#pod-knobs): GKE Autopilot's accelerator label, a
# private registry, the NVIDIA RuntimeClass of k3s, a PriorityClass, a long grace period,
# a NotReady spell of 3 minutes ridden out, limits above the requests.
KNOBS = SETTINGS.replace(
    node_selector=(("cloud.google.com/gke-accelerator", "nvidia-l4"),), image_pull_secrets=("regcred", "mirror"),
    runtime_class="nvidia", pod_priority_class="training-high", termination_grace_period_s=120.0,
    node_lost_toleration_s=180.0, cpu_limit_per_gpu_m=3000, memory_limit_per_gpu_bytes=12 * quantity.GIB)
NODE_LOST_3M = [{"key": f"node.kubernetes.io/{why}", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 180} for why in ("not-ready", "unreachable")]
KNOB_FIELDS = {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
               "imagePullSecrets": [{"name": "regcred"}, {"name": "mirror"}], "runtimeClassName": "nvidia",
               "priorityClassName": "training-high", "terminationGracePeriodSeconds": 120}


def test_a_worker_with_every_pod_knob():
    assert manifests.worker_pod(KNOBS, 0, "gpu-a", 2) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "demo-worker-0",
            "namespace": "ml",
            "labels": labels("worker", **{"distributetrain.io/worker-index": "0"}),
            "ownerReferences": OWNER,
            "annotations": {"distributetrain.io/gpus": "2", **NO_DISRUPTION, **NO_MESH},
        },
        "spec": {
            "restartPolicy": "Never",
            "affinity": pinned("gpu-a"),
            "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
            "imagePullSecrets": [{"name": "regcred"}, {"name": "mirror"}],
            "runtimeClassName": "nvidia",
            "priorityClassName": "training-high",
            "securityContext": POD_SECURITY,
            "containers": [{
                "name": "worker",
                "image": "reg.example.com/base:1",
                "args": ["/bin/sh", "-c", manifests.WORKER_SCRIPT],
                "env": [{"name": "DT_PORT", "value": "12345"},
                        {"name": "DT_MANAGER_URL", "value": "http://10.0.0.9:8470/hosts"},
                        {"name": "DT_ORPHAN_AFTER_S", "value": "300"},
                        {"name": "DT_ORPHAN_CHECK_S", "value": "30"}],
                "ports": [{"name": "ssh", "containerPort": 12345, "protocol": "TCP"}],
                "readinessProbe": {"tcpSocket": {"port": 12345}, "periodSeconds": 1, "failureThreshold": 3},
                # Limits are per GPU too, above the requests.
                "resources": {"requests": {"cpu": "4", "memory": "16Gi"},
                              "limits": {"nvidia.com/gpu": "2", "cpu": "6", "memory": "24Gi"}},
                "securityContext": CONTAINER_SECURITY,
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": [{"name": "ssh", "mountPath": "/etc/distributetrain/ssh", "readOnly": True},
                                 {"name": "dshm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}],
            }],
            # /dev/shm is the pod's memory limit, not its request.
            "volumes": [{"name": "ssh", "secret": {"secretName": "demo-ssh", "defaultMode": 0o440, "items": [
                {"key": "authorized_keys", "path": "authorized_keys"},
                {"key": "ssh_host_ed25519_key", "path": "ssh_host_ed25519_key"}]}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "24Gi"}}, {"name": "tmp", "emptyDir": {}}],
            "terminationGracePeriodSeconds": 120,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "tolerations": [GPU_TOLERATION, *NODE_LOST_3M],
        },
    }


def test_every_job_pod_pinned_for_a_new_node_or_queued_carries_the_knobs():
    settings = KNOBS.replace(num_gpus=5)
    _, *pinned = manifests.job_objects(settings, [("gpu-a", 2), ("(new node)", 2), ("gpu-c", 1)], KEYS)
    _, *queued = podgroup.queued_attempt(settings, [2, 2, 1], KEYS, 0, "demo-r0-abc")
    assert len(pinned) == len(queued) == 3
    for pod in (*pinned, *queued):
        assert {key: pod["spec"][key] for key in KNOB_FIELDS} == KNOB_FIELDS, pod["metadata"]["name"]
        assert pod["spec"]["tolerations"] == [GPU_TOLERATION, *NODE_LOST_3M]
        assert pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] in ("3", "6")
    # The pod for a new node keeps its own affinity: the selector's labels are in both.
    assert pinned[1]["metadata"]["labels"]["distributetrain.io/awaits-new-node"] == "true"
    assert pinned[1]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-l4"]}]}]}


def test_without_knobs_a_pod_names_none_of_them():
    for pod in manifests.job_objects(SETTINGS, [("a", 1), ("b", 1)], KEYS)[1:]:
        spec = pod["spec"]
        assert not {"nodeSelector", "imagePullSecrets", "runtimeClassName", "priorityClassName"} & set(spec)
        assert spec["terminationGracePeriodSeconds"] == 10 and "cpu" not in spec["containers"][0]["resources"]["limits"]
