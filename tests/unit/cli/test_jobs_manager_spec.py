"""The manager's Pod and Job, compared whole: against manager.yaml and manager-job.yaml,
and for the flags a user types (validated by the manager's own parser)."""

import copy
from pathlib import Path

import pytest
import yaml

from distributetrain.cli import main as cli, jobflags
from distributetrain.cli.jobs import commands, manager_spec
from distributetrain.cli.jobs.manager_spec import ManagerOptions
from distributetrain.core.job import jobspec
from distributetrain.core import names

REPO = Path(__file__).resolve().parents[3]
LABELS = {"app.kubernetes.io/name": "distributetrain", "distributetrain.io/role": "manager",
          "distributetrain.io/job": "demo"}
DOWNWARD_ENV = [
    {"name": "MANAGER_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    {"name": "MANAGER_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    {"name": "MANAGER_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    {"name": "MANAGER_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
]
PORTS = [{"name": "discovery", "containerPort": 8470, "protocol": "TCP"}]
# The manager pod is never evicted to scale down or consolidate its node: the job would fail.
# Never evicted to scale down, and no mesh's sidecar (the admission policy admits the manager alone).
MANAGER_ANNOTATIONS = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false", "karpenter.sh/do-not-disrupt": "true",
                       "sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}
RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
# PodSecurity `restricted`, as the manager image's own user or the one the platform assigns
# (no UID: OpenShift refuses any but its own), on a read-only root filesystem.
POD_SECURITY = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                      "readOnlyRootFilesystem": True}


def submitted(argv):
    """What `distributetrain submit ARGV` would create (no cluster needed)."""
    flags, script_args = jobflags.split_script_args(argv)
    args = cli.build_parser().parse_args(["submit", *flags])
    settings, options = commands.submission(args, script_args)
    return manager_spec.manager_object(settings, options)


def manager_from_file(path):
    """Build what a YAML file holds, from the settings its own arguments parse to."""
    obj = yaml.safe_load((REPO / path).read_text())
    pod_spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
    container = pod_spec["containers"][0]
    flags, script_args = jobflags.split_script_args(container["args"])
    args = cli.build_parser().parse_args(["pre-training", *flags, "--job-name", obj["metadata"]["name"],
                                          "--namespace", obj["metadata"]["namespace"]])
    settings = jobflags.settings_from_args(args, script_args)
    options = ManagerOptions(image=container["image"], service_account=pod_spec["serviceAccountName"],
                             as_job=obj["kind"] == "Job",
                             ttl_after_finished_s=obj["spec"].get("ttlSecondsAfterFinished", 0))
    return obj, manager_spec.manager_object(settings, options)


def test_pod_is_manager_yaml():
    on_file, built = manager_from_file("manager.yaml")
    # manager.yaml's pod name is fixed and it carries no job label: lookups fall back to the name.
    expected = copy.deepcopy(on_file)
    expected["metadata"]["labels"][names.LABEL_JOB] = on_file["metadata"]["name"]
    assert built == expected


def test_job_is_manager_job_yaml():
    on_file, built = manager_from_file("manager-job.yaml")
    assert built == on_file
    assert on_file["spec"]["template"]["spec"] == manager_from_file("manager.yaml")[0]["spec"]


def test_submit_creates_a_pod_like_manager_yaml():
    assert submitted(["--num-gpus", "6", "--image", "reg.example.com/base:1", "--filename", "/train/train.py",
                      "--pvc", "data:/train", "--namespace", "ml", "--name", "demo", "--", "--epochs", "3"]) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "demo", "namespace": "ml", "labels": LABELS, "annotations": MANAGER_ANNOTATIONS},
        "spec": {
            "serviceAccountName": "distributetrain-manager",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 60,
            "securityContext": POD_SECURITY,
            "containers": [{
                "name": "manager",
                "image": "distributetrain/manager:0.1.0",
                "command": ["manager.sh"],
                "args": ["--num-gpus=6", "--image=reg.example.com/base:1", "--port=12345",
                         "--filename=/train/train.py", "--host-network=false", "--pvc=data:/train",
                         "--", "--epochs", "3"],
                "env": DOWNWARD_ENV,
            "ports": PORTS,
                "resources": RESOURCES,
                "securityContext": CONTAINER_SECURITY,
            }],
        },
    }


def test_submit_as_job():
    pod_spec = {
        "serviceAccountName": "trainer",
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 60,
        "securityContext": POD_SECURITY,
        "containers": [{
            "name": "manager",
            "image": "reg.example.com/manager:2",
            "command": ["manager.sh"],
            "args": ["--num-gpus=2", "--image=img:1", "--port=2222", "--filename=/opt/distributetrain/train.py",
                     "--host-network=true", "--delete-chief"],
            "env": DOWNWARD_ENV,
            "ports": PORTS,
            "resources": RESOURCES,
            "securityContext": CONTAINER_SECURITY,
        }],
        "nodeSelector": {"pool": "cpu", "zone": "z"},
    }
    assert submitted(["--num-gpus", "2", "--image", "img:1", "--port", "2222", "--host-network", "--delete-chief",
                      "--namespace", "ml", "--name", "demo", "--as-job", "--ttl-after-finished", "1h",
                      "--manager-image", "reg.example.com/manager:2", "--manager-service-account", "trainer",
                      "--manager-node-selector", "pool=cpu,zone=z"]) == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "demo", "namespace": "ml", "labels": LABELS},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": LABELS, "annotations": MANAGER_ANNOTATIONS}, "spec": pod_spec},
        },
    }


def test_job_ttl_defaults_to_a_day():
    job = submitted(["--num-gpus", "1", "--image", "img:1", "--namespace", "ml", "--as-job"])
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400


def test_every_job_flag_reaches_the_manager_unchanged():
    flags = ["--num-gpus", "7", "--image", "reg:5000/team/img:1.2", "--port", "2022", "--filename", "/w/t.py",
             "--host-network", "true", "--gpu-resource", "amd.com/gpu", "--node-selector", "pool=a,zone=z",
             "--node-selector", "tier=gold", "--toleration", "gpu:NoSchedule", "--toleration", "k=v",
             "--toleration", "x=:NoExecute", "--env", "A=b=c", "--env", "EMPTY=",
             "--env-from-secret", "s3-creds", "--env-from-secret", "wandb.key", "--pvc", "data:/data:ro",
             "--pvc", "ckpt:/ckpt", "--worker-ready-timeout", "90s", "--active-deadline", "2.5h",
             "--orphan-timeout", "90s",
             "--wait-for-gpus", "500ms", "--ssh-attempts", "5", "--delete-chief", "--allow-shared-gpus", "--max-restarts", "2",
             "--queue", "team-a", "--priority-class", "high", "--lock-namespace", "locks",
             "--service-account", "trainer", "--cpu-per-gpu", "1500m", "--memory-per-gpu", "20G",
             "--shm-size", "3Gi", "--topology", "topology.kubernetes.io/zone,example.com/rack!",
             "--mesh-injection", "true"]
    script_args = ["--epochs", "2", "--", "-x", "with space"]
    args = cli.build_parser().parse_args(["submit", *flags, "--namespace", "ml", "--name", "demo"])
    settings, _ = commands.submission(args, script_args)
    assert settings.allow_shared_gpus and settings.delete_chief  # switches are read, not only passed on

    manager_flags, manager_script_args = jobflags.split_script_args(jobspec.to_args(settings))
    parsed = cli.build_parser().parse_args(["pre-training", *manager_flags, "--job-name", "demo",
                                            "--namespace", "ml"])
    assert jobflags.settings_from_args(parsed, manager_script_args) == settings


def test_defaults_are_left_out():
    args = cli.build_parser().parse_args(["submit", "--num-gpus", "1", "--image", "img", "--namespace", "ml"])
    settings, _ = commands.submission(args, [])
    assert jobspec.to_args(settings) == [
        "--num-gpus=1", "--image=img", "--port=12345", "--filename=/opt/distributetrain/train.py",
        "--host-network=false"]


def test_generated_names_are_valid_and_distinct():
    generated = {manager_spec.generated_name() for _ in range(50)}
    assert len(generated) == 50
    assert all(name.startswith("dt-") and len(name) == 9 and name.islower() for name in generated)


@pytest.mark.parametrize("as_job,longest", [(False, 50), (True, 44)])
def test_longest_name_keeps_every_derived_name_valid(as_job, longest):
    assert manager_spec.max_name_length(as_job) == longest


def test_the_manager_pulls_with_the_jobs_secrets_and_has_its_priority():
    """Its image is most likely in the job's private registry, and preempted it ends the job."""
    assert submitted(["--num-gpus", "2", "--image", "reg.example.com/base:1", "--namespace", "ml", "--name", "demo",
                      "--manager-image", "reg.example.com/manager:1", "--image-pull-secret", "regcred",
                      "--pod-priority-class", "training-high", "--runtime-class", "nvidia"]) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "demo", "namespace": "ml", "labels": LABELS, "annotations": MANAGER_ANNOTATIONS},
        "spec": {
            "serviceAccountName": "distributetrain-manager",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 60,
            "securityContext": POD_SECURITY,
            "containers": [{
                "name": "manager",
                "image": "reg.example.com/manager:1",
                "command": ["manager.sh"],
                "args": ["--num-gpus=2", "--image=reg.example.com/base:1", "--port=12345",
                         "--filename=/opt/distributetrain/train.py", "--host-network=false",
                         "--image-pull-secret=regcred", "--runtime-class=nvidia", "--pod-priority-class=training-high"],
                "env": DOWNWARD_ENV,
                "ports": PORTS,
                "resources": RESOURCES,
                "securityContext": CONTAINER_SECURITY,
            }],
            # Not its runtime class: the manager needs no GPU.
            "imagePullSecrets": [{"name": "regcred"}],
            "priorityClassName": "training-high",
        },
    }
