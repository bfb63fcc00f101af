"""The user's CLI against the real control plane and node agent, with the user's
(admin) kubeconfig: submit, follow, list, status, logs and cancel, as a Pod and as a
batch/v1 Job. The manager runs under rbac/, applied into the test's namespace."""

import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from kubernetes import client

from jobharness import HELLO, LOCAL_MACHINE_FLAGS, REPO, node_pool, script_volume
from harness.polling import poll_until

pytestmark = pytest.mark.cluster

CLI_TIMEOUT_S = 60.0
FOLLOW_TIMEOUT_S = 420.0  # manager start, two pods, SSH, and one epoch of TensorFlow on CPU
STATE_TIMEOUT_S = 180.0
POLL_INTERVAL_S = 1.0
# Reports its rank, then sleeps so there is a running job to look at and cancel.
SLEEPY = {"hello.py": HELLO}
TRAINING_IMAGE = "distributetrain/base:0.1.0"  # not pulled by the local cluster


def on(pool) -> list[str]:
    """The job and its manager on the test's own nodes (other tests' nodes come and go)."""
    return ["--node-selector", pool.selector, "--manager-node-selector", pool.selector]


def dt(cluster, command, *args, timeout_s=CLI_TIMEOUT_S):
    """`distributetrain COMMAND --kubeconfig … ARGS`, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "distributetrain", command, "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True, text=True, timeout=timeout_s,
    )


def status(cluster, namespace, name) -> dict:
    result = dt(cluster, "status", name, "-n", namespace, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def wait_for_phase(cluster, namespace, name, phase) -> dict:
    seen = {}

    def reached():
        seen.update(status(cluster, namespace, name))
        return seen["phase"] == phase and dict(seen)

    return poll_until(reached, STATE_TIMEOUT_S, lambda: f"job {name} {phase}: {seen}", POLL_INTERVAL_S)


def objects(api_client, namespace) -> set[str]:
    core = client.CoreV1Api(api_client)
    pods = {f"pod/{p.metadata.name}" for p in core.list_namespaced_pod(namespace).items}
    secrets = {f"secret/{s.metadata.name}" for s in core.list_namespaced_secret(namespace).items
               if s.metadata.labels and "distributetrain.io/job" in s.metadata.labels}
    jobs = {f"job/{j.metadata.name}" for j in client.BatchV1Api(api_client).list_namespaced_job(namespace).items}
    return pods | secrets | jobs


def test_submit_follow_list_status_logs_cancel(cluster, api_client, namespace, rbac):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool:
        # More GPUs than the nodes advertise: the user's own credentials list them, so the
        # CLI refuses at once, as the manager would, and creates nothing.
        refused = dt(cluster, "submit", *LOCAL_MACHINE_FLAGS, "--num-gpus", "9", "--image", TRAINING_IMAGE,
                     "--namespace", namespace, "--name", "mnist", *on(pool))
        assert (refused.returncode, refused.stdout, refused.stderr.splitlines()[-1:]) == (2, "", [
            "distributetrain: error: --num-gpus: requested 9 GPUs but the nodes matching --node-selector "
            "advertise 2 in all"]), refused.stderr
        assert objects(api_client, namespace) == set()

        followed = dt(cluster, "submit", *LOCAL_MACHINE_FLAGS, "--num-gpus", "2", "--image", TRAINING_IMAGE, "--namespace", namespace,
                      "--name", "mnist", *on(pool), "--follow", "--", "--epochs", "1",
                      timeout_s=FOLLOW_TIMEOUT_S)
        assert followed.returncode == 0, followed.stdout + followed.stderr
        name, training = followed.stdout.split("\n", 1)
        assert name == "mnist"
        assert "epoch=1 " in training and "size=2" in training, followed.stdout
        progress = followed.stderr
        # Not "workers Ready: 1/1": once the chief runs (it may before its worker is Ready),
        # follow streams the chief's output and shows no progress until the chief ends.
        for line in [f"mnist: plan: 2 GPUs on 2 nodes ({pool.node('a')}=1,{pool.node('b')}=1, the chief's share last)",
                     "mnist: chief mnist-chief: Running", "mnist: Succeeded, exit code 0: training finished"]:
            assert line in progress.splitlines(), progress
        # Once the chief ended: never "Training" again, and the workers were torn down, not unready.
        lines = progress.splitlines()
        # The end is the first of these follow prints (a quick teardown may pass unseen).
        ends = ("mnist: chief mnist-chief: Succeeded", "mnist: phase: TearingDown",
                "mnist: Succeeded, exit code 0: training finished")
        ended = min(lines.index(line) for line in ends if line in lines)
        assert "mnist: phase: Training" not in lines[ended:], progress

        listed = dt(cluster, "list", "-n", namespace)
        assert listed.returncode == 0, listed.stderr
        header, row = listed.stdout.splitlines()
        assert header.split() == ["NAME", "PHASE", "GPUS", "NODES", "AGE", "EXIT", "REASON"]
        assert row.split()[:4] + row.split()[5:] == [
            "mnist", "Succeeded", "2", f"{pool.node('a')}=1,{pool.node('b')}=1", "0", "training", "finished"]

        current = status(cluster, namespace, "mnist")
        assert {k: current[k] for k in ("kind", "managerPod", "phase", "gpus", "exitCode", "reason", "chief")} == {
            "kind": "Pod", "managerPod": "mnist", "phase": "Succeeded", "gpus": 2, "exitCode": 0,
            "reason": "training finished", "chief": "Succeeded"}
        assert current["plan"] == [{"node": pool.node("a"), "gpus": 1}, {"node": pool.node("b"), "gpus": 1}]
        shown = dt(cluster, "status", "mnist", "-n", namespace).stdout
        assert re.search(r"^Workers: +1, torn down after the chief ended$", shown, re.MULTILINE), shown

        logs = dt(cluster, "logs", "mnist", "-n", namespace)
        assert (logs.returncode, logs.stdout) == (0, training)
        manager_logs = dt(cluster, "logs", "mnist", "--manager", "-n", namespace)
        assert f"plan {pool.node('a')}=1,{pool.node('b')}=1" in manager_logs.stdout

        # Finished: the workers and the Secret are gone already; the chief is kept for its logs.
        cancelled = dt(cluster, "cancel", "mnist", "-n", namespace)
        assert (cancelled.returncode, cancelled.stdout) == (0, "deleted pod/mnist\ndeleted pod/mnist-chief\n")
        assert objects(api_client, namespace) == set()


def test_as_job_cancel_mid_training_deletes_everything(cluster, api_client, namespace, rbac, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, SLEEPY, tmp_path) as claim:
        submitted = dt(cluster, "submit", *LOCAL_MACHINE_FLAGS, "--num-gpus", "2", "--image", TRAINING_IMAGE, "--namespace", namespace,
                       "--name", "sleepy", "--as-job", *on(pool), "--pvc", f"{claim}:/work",
                       "--filename", "/work/hello.py", "--", "0", "600")
        assert (submitted.returncode, submitted.stdout) == (0, "sleepy\n"), submitted.stderr
        current = wait_for_phase(cluster, namespace, "sleepy", "Training")
        pod = current["managerPod"]
        assert current["kind"] == "Job" and pod.startswith("sleepy-") and pod != "sleepy"

        listed = dt(cluster, "list", "-n", namespace)
        assert listed.stdout.splitlines()[1].split()[:3] == ["sleepy", "Training", "2"]

        def ranks_logged() -> subprocess.CompletedProcess | None:
            logs = dt(cluster, "logs", "sleepy", "-n", namespace)
            return logs if "rank=" in logs.stdout else None

        logs = poll_until(ranks_logged, STATE_TIMEOUT_S, lambda: "a rank's line from `logs sleepy`, whose stderr is: "
                          + dt(cluster, "logs", "sleepy", "-n", namespace).stderr, POLL_INTERVAL_S)
        assert "size=2" in logs.stdout

        before = objects(api_client, namespace)
        assert before == {"job/sleepy", f"pod/{pod}", f"pod/{pod}-chief", f"pod/{pod}-worker-0", f"secret/{pod}-ssh"}
        cancelled = dt(cluster, "cancel", "sleepy", "-n", namespace, "--timeout", "2m", timeout_s=180)
        assert cancelled.returncode == 0, cancelled.stderr
        assert set(cancelled.stdout.split("deleted ")) - {""} == {f"{o}\n" for o in before}
        assert objects(api_client, namespace) == set()
        missing = dt(cluster, "status", "sleepy", "-n", namespace)
        assert missing.returncode == 1 and "no job 'sleepy'" in missing.stderr


def test_follow_exits_with_the_managers_exit_code(cluster, api_client, namespace, rbac, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, SLEEPY, tmp_path) as claim:
        followed = dt(cluster, "submit", *LOCAL_MACHINE_FLAGS, "--num-gpus", "2", "--image", TRAINING_IMAGE, "--namespace", namespace,
                      *on(pool), "--pvc", f"{claim}:/work", "--filename", "/work/hello.py",
                      "--follow", "--", "3", timeout_s=FOLLOW_TIMEOUT_S)
        name = followed.stdout.split("\n", 1)[0]
        assert name.startswith("dt-") and "rank=" in followed.stdout, followed.stdout + followed.stderr
        manager = client.CoreV1Api(api_client).read_namespaced_pod(name, namespace)
        code = manager.status.container_statuses[0].state.terminated.exit_code
        # horovodrun reports a rank's failure as its own exit code (1 across hosts).
        assert followed.returncode == code != 0, followed.stdout + followed.stderr
        assert followed.stderr.splitlines()[-1] == f"{name}: Failed, exit code {code}: chief exited with code {code}"


def test_bad_input_creates_nothing(cluster, api_client, namespace, rbac):
    result = dt(cluster, "submit", *LOCAL_MACHINE_FLAGS, "--num-gpus", "2", "--image", TRAINING_IMAGE, "--namespace", namespace,
                "--pvc", "no-path")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("distributetrain: error: --pvc: ") and result.stderr.count("\n") == 1
    assert objects(api_client, namespace) == set()


def test_kustomization_and_yaml_retarget_and_pass_the_api_server(cluster, namespace, rbac, tmp_path):
    shutil.copytree(REPO / "rbac", tmp_path / "rbac")
    shutil.copy(REPO / "manager.yaml", tmp_path)
    kustomization = (REPO / "kustomization.yaml").read_text()
    # As its comments say: uncomment `namespace:` and, with it, the Lease transformers.
    head, _, transformers = kustomization.partition("# transformers:")
    transformers = "transformers:" + "\n".join(line.removeprefix("# ") for line in transformers.split("\n"))
    kustomization = (head + transformers).replace("# namespace: team-a", f"namespace: {namespace}")
    (tmp_path / "kustomization.yaml").write_text(kustomization.replace("team-a", namespace))
    rendered = cluster.kubectl("kustomize", str(tmp_path), check=True).stdout
    documents = list(yaml.safe_load_all(rendered))
    assert sorted(d["kind"] for d in documents) == [
        "ClusterRole", "ClusterRoleBinding", "Pod", "Role", "Role", "RoleBinding", "RoleBinding", "ServiceAccount",
        *["ValidatingAdmissionPolicy"] * 3, *["ValidatingAdmissionPolicyBinding"] * 3]
    for document in documents:
        lease_grant = document["metadata"]["name"].startswith("distributetrain-placement")
        if document["kind"] == "ValidatingAdmissionPolicyBinding":
            assert document["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == [
                namespace]
        elif not document["kind"].startswith(("Cluster", "ValidatingAdmissionPolicy")):
            assert document["metadata"]["namespace"] == ("default" if lease_grant else namespace)
        for subject in document.get("subjects", []):
            assert subject["namespace"] == namespace
    applied = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    assert applied.returncode == 0, applied.stderr

    job = yaml.safe_load((REPO / "manager-job.yaml").read_text())
    job["metadata"]["namespace"] = namespace
    applied = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(job))
    assert applied.returncode == 0, applied.stderr
