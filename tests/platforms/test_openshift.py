"""OpenShift: a namespace that assigns each pod a UID of its own range and refuses any
other, as restricted-v2 does (localcluster/localcluster/openshift.py, the local cluster's
own admission). The admission assigns and refuses; a job trains there, exit 0, under
exactly rbac/, its manager and its pods under the assigned UID, which no /etc/passwd
knows, on read-only root filesystems; a UID outside the range is bad input naming the flag."""

import json
import os

import pytest
import yaml
from kubernetes import client

from distributetrain.core import exitcodes
from jobharness import REPO, node_pool, script_volume
from localcluster import openshift

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

IMAGE = "distributetrain/base:0.1.0"
ASSIGNED = openshift.FIRST_UID
RANGES = f"must be in the ranges: [{ASSIGNED}, {ASSIGNED + openshift.RANGE_SIZE - 1}]"
# Each rank says who it runs as and where it may write, then trains (base_image/train.py).
WHO_AND_TRAIN = """\
import errno, os, pwd, runpy, sys
uid = os.getuid()
known = any(line.split(":")[2] == str(uid) for line in open("/etc/passwd"))
try:
    open("/opt/distributetrain/written", "w")
    root = "writable"
except OSError as e:
    root = "read-only" if e.errno == errno.EROFS else f"refused-{e.errno}"
print(f"rank={os.environ['HOROVOD_RANK']} uid={uid} gid={os.getgid()} user={pwd.getpwuid(uid).pw_name} "
      f"in_etc_passwd={known} home={os.environ['HOME']} root={root}", flush=True)
sys.argv = ["/opt/distributetrain/train.py", *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
JOB_ARGS = ("--image=distributetrain/base:0.1.0", "--cpu-per-gpu=250m", "--memory-per-gpu=2Gi",
            "--worker-ready-timeout=90s")


@pytest.fixture
def openshift_like(cluster, api_client, namespace):
    """The test's namespace, OpenShift-like: UIDs 1000680000-1000689999, restricted-v2."""
    openshift.make_openshift_like(cluster, namespace, IMAGE)
    return namespace


def pod(name: str, security_context: dict | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": IMAGE}],
                     **({"securityContext": security_context} if security_context else {}), **spec}}


def admitted(api_client, namespace: str, manifest: dict) -> dict:
    return client.ApiClient().sanitize_for_serialization(
        client.CoreV1Api(api_client).create_namespaced_pod(namespace, manifest, dry_run="All"))


def refusal(api_client, namespace: str, manifest: dict) -> str:
    with pytest.raises(client.ApiException) as refused:
        admitted(api_client, namespace, manifest)
    assert refused.value.status == 403
    return json.loads(refused.value.body)["message"]


def test_the_admission_assigns_the_namespaces_ids_and_refuses_others(api_client, openshift_like, rbac):
    spec = admitted(api_client, openshift_like, pod("plain"))["spec"]
    assert spec["securityContext"] == {"runAsUser": ASSIGNED, "fsGroup": ASSIGNED,
                                       "seLinuxOptions": {"level": openshift.MCS_LEVEL},
                                       "seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["ALL"]}}
    # A UID of the range is the pod's to choose; one outside, or an fsGroup outside, is not.
    assert admitted(api_client, openshift_like, pod("in-range", {"runAsUser": ASSIGNED + 5}))["spec"][
        "securityContext"]["runAsUser"] == ASSIGNED + 5
    said = refusal(api_client, openshift_like, pod("fixed", {"runAsUser": 1000}))
    assert f"{openshift.REFUSAL}: [provider \"restricted-v2\": .spec.securityContext.runAsUser: Invalid value: " \
           f"1000: {RANGES}]" in said, said
    said = refusal(api_client, openshift_like, pod("container-uid", containers=[
        {"name": "c", "image": IMAGE, "securityContext": {"runAsUser": 0}}]))
    assert f".spec.securityContext.runAsUser: Invalid value: 0: {RANGES}" in said, said
    assert ".spec.securityContext.fsGroup: Invalid value: 1000" in refusal(
        api_client, openshift_like, pod("group", {"fsGroup": 1000}))
    assert "privilege escalation" in refusal(api_client, openshift_like, pod("escalating", containers=[
        {"name": "c", "image": IMAGE, "securityContext": {"allowPrivilegeEscalation": True}}]))
    assert "Host network" in refusal(api_client, openshift_like, pod("host", hostNetwork=True))
    assert ".spec.volumes" in refusal(api_client, openshift_like, pod("host-path", volumes=[
        {"name": "h", "hostPath": {"path": "/etc"}}]))
    # The manager as users apply it (its ServiceAccount from rbac/): no UID of its own, so the namespace's.
    manager = yaml.safe_load((REPO / "manager.yaml").read_text())
    manager["metadata"]["namespace"] = openshift_like
    assert admitted(api_client, openshift_like, manager)["spec"]["securityContext"]["runAsUser"] == ASSIGNED


def test_other_namespaces_are_left_alone(cluster, api_client, openshift_like):
    other = "t-not-openshift-" + openshift_like[-6:]
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": other, "labels": {"distributetrain.test/namespace": "true"}}})
    try:
        assert admitted(api_client, other, pod("fixed", {"runAsUser": 1000}))["spec"]["securityContext"] == {
            "runAsUser": 1000}
    finally:
        core.delete_namespace(other)


def test_a_job_trains_under_the_assigned_uid_with_no_passwd_entry_on_read_only_roots(
        cluster, api_client, openshift_like, jobs, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, openshift_like, {"who.py": WHO_AND_TRAIN}, tmp_path) as claim:
        # The claim's files are the project's UID's, as a provisioner honouring fsGroup makes them.
        os.chown(tmp_path / "volume", ASSIGNED, ASSIGNED)
        jobs.submit("trains", ["--num-gpus=2", *JOB_ARGS, f"--node-selector={pool.selector}",
                               f"--pvc={claim}:/work", "--filename=/work/who.py", "--read-only-root-filesystem",
                               "--", "--epochs=2", "--samples=1024", "--checkpoint-dir=/work/checkpoints"])
        chief = jobs.wait_for("trains-chief", lambda p: p["status"].get("phase") in ("Running", "Succeeded"), 240)
        assert chief["spec"]["securityContext"]["runAsUser"] == ASSIGNED  # the admission's, not the job's
        assert chief["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        assert jobs.exit_code("trains", timeout_s=300) == 0, jobs.report("trains")
        assert jobs.pod("trains")["spec"]["securityContext"]["runAsUser"] == ASSIGNED
        assert f"running as uid {ASSIGNED}" in jobs.logs("trains")
        # Both ranks, the worker's started over SSH: the assigned UID, a user no /etc/passwd
        # has, a home on the scratch volume, and a root filesystem they cannot write.
        trained = jobs.logs("trains-chief")
        for rank in (0, 1):
            assert (f"rank={rank} uid={ASSIGNED} gid=0 user=distributetrain-{ASSIGNED} in_etc_passwd=False "
                    f"home=/tmp/distributetrain-home root=read-only") in trained, trained
        assert "done start_epoch=0 epochs=2" in trained, trained
        saved = sorted(p.name for p in (tmp_path / "volume" / "checkpoints").iterdir())
        assert any(name.startswith("checkpoint-0002") for name in saved), saved
        assert all(path.stat().st_uid == ASSIGNED for path in (tmp_path / "volume" / "checkpoints").iterdir())


def test_a_uid_outside_the_range_is_bad_input_naming_the_flag(cluster, openshift_like, jobs):
    with node_pool(cluster, {"a": 1}) as pool:
        jobs.submit("fixed", ["--num-gpus=1", *JOB_ARGS, f"--node-selector={pool.selector}", "--run-as-user=1000"])
        assert jobs.exit_code("fixed", timeout_s=120) == exitcodes.USAGE, jobs.report("fixed")
        log = jobs.logs("fixed")
        assert "--run-as-user: the namespace's security context constraints refuse the job's Pod" in log, log
        assert f"Invalid value: 1000: {RANGES}" in log, log
        assert set(jobs.pods()) == {"fixed"} and jobs.secrets("fixed-") == []
