"""SSH: fresh keys per job, private key only in the chief and only for the job's user, keys
only (no passwords), and another job's pod cannot log into this job's workers. The second
job runs as the owner of files an earlier job left on the volume (--run-as-user 2000, a UID
the image has no /etc/passwd entry for): its ranks, the worker's over SSH, write there,
where the first job's user may not."""

import base64
import os
import subprocess

import pytest

from harness.polling import poll_until
from jobharness import HOLD_UNTIL_RELEASED, REPO, SCRIPTS, job_args, node_pool, release_ranks, script_volume

pytestmark = pytest.mark.cluster

BASE_IMAGE_USER = "distributetrain"  # uid 1000 of base_image/Dockerfile: the one user its sshd logs in
VOLUME_OWNER = 2000  # an earlier job's UID, whose files are on the volume; the base image has no such user
# From Training (the chief running horovodrun) until both ranks report: each imports
# TensorFlow first, 4 CPU-seconds, over 30 s on CI's loaded cores once.
RANKS_REPORT_S = 120

# Each rank reports what it can see of the SSH keys where it runs, then holds until the
# test releases it.
KEY_PROBE = HOLD_UNTIL_RELEASED + """\
import os, stat
rank = os.environ.get("HOROVOD_RANK")
for path in ("/etc/distributetrain/ssh-client/id_ed25519", "/etc/distributetrain/ssh/ssh_host_ed25519_key"):
    try:
        st = os.stat(path)
        print(f"rank={rank} {path} mode={oct(stat.S_IMODE(st.st_mode))} uid={st.st_uid} gid={st.st_gid}", flush=True)
    except FileNotFoundError:
        print(f"rank={rank} {path} absent", flush=True)
try:
    with open(f"/work/owned/rank-{rank}-uid-{os.getuid()}", "w") as written:
        written.write("checkpoint")
    print(f"rank={rank} uid={os.getuid()} wrote to the volume", flush=True)
except PermissionError:
    print(f"rank={rank} uid={os.getuid()} refused by the volume", flush=True)
hold_until_released()
"""


def secret_data(jobs, name):
    secret = jobs.core.read_namespaced_secret(name, jobs.namespace)
    return {k: base64.b64decode(v).decode() for k, v in secret.data.items()}


def test_keys_fresh_private_only_for_the_job_user_in_the_chief_never_logged(cluster, api_client, namespace, jobs,
                                                                          tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1, "c": 1, "d": 1}) as pool, \
            script_volume(api_client, namespace, {**SCRIPTS, "probe.py": KEY_PROBE}, tmp_path) as claim:
        owned = tmp_path / "volume" / "owned"  # as an earlier job as VOLUME_OWNER left it
        owned.mkdir(mode=0o755)
        (owned / "checkpoint-0001.index").write_text("")
        for path in (owned, owned / "checkpoint-0001.index"):
            os.chown(path, VOLUME_OWNER, VOLUME_OWNER)
        for job, user in (("one", ()), ("two", (f"--run-as-user={VOLUME_OWNER}",))):
            jobs.submit(job, [a.replace("/work/hello.py", "/work/probe.py") for a in
                              job_args(pool, claim, 2, "--delete-chief", *user)])
        for job in ("one", "two"):
            try:
                # Training: the worker Ready, the chief running (it runs from its creation).
                jobs.wait_for(job, lambda p: (p["metadata"].get("annotations") or {}).get(
                    "distributetrain.io/phase") == "Training", 90)
            except AssertionError as e:
                raise AssertionError(f"{e}\nmanager {job}'s log:\n{jobs.log_tail(job)}") from None
        one, two = secret_data(jobs, "one-ssh"), secret_data(jobs, "two-ssh")
        assert one["id_ed25519"] != two["id_ed25519"] and one["ssh_host_ed25519_key"] != two["ssh_host_ed25519_key"]
        # No pod spec carries key material.
        for pod in jobs.pods().values():
            assert "PRIVATE KEY" not in str(pod)

        def with_both_ranks(chief: str) -> str:
            log = jobs.logs(chief)
            return log if "rank=1 uid=" in log and "rank=0 uid=" in log else ""

        for job, uid in (("one", 1000), ("two", VOLUME_OWNER)):
            chief_log = poll_until(lambda: with_both_ranks(f"{job}-chief"), RANKS_REPORT_S,
                                   lambda: f"both ranks in {job}-chief's log, which is:\n{jobs.logs(f'{job}-chief')}",
                                   hopeless=lambda: jobs.ended(f"{job}-chief"))
            # In the chief only, root's and readable by the job user's group alone (fsGroup).
            assert f"rank=0 /etc/distributetrain/ssh-client/id_ed25519 mode=0o440 uid=0 gid={uid}" in chief_log
            assert "rank=1 /etc/distributetrain/ssh-client/id_ed25519 absent" in chief_log  # no client key on workers
            assert "rank=0 /etc/distributetrain/ssh/ssh_host_ed25519_key absent" in chief_log
            assert f"rank=1 /etc/distributetrain/ssh/ssh_host_ed25519_key mode=0o440 uid=0 gid={uid}" in chief_log
            # The volume's files are VOLUME_OWNER's: its job writes there (the worker's rank
            # over SSH too, under a UID no /etc/passwd has), the other one may not.
            verdict = "wrote to" if uid == VOLUME_OWNER else "refused by"
            for rank in (0, 1):
                assert f"rank={rank} uid={uid} {verdict} the volume" in chief_log, chief_log
        assert sorted(p.name for p in owned.iterdir()) == [
            "checkpoint-0001.index", f"rank-0-uid-{VOLUME_OWNER}", f"rank-1-uid-{VOLUME_OWNER}"]

        # Another job's key cannot log into this job's worker; neither can a password.
        worker_ip = jobs.pod("one-worker-0")["status"]["podIP"]
        intruder = tmp_path / "intruder"
        intruder.write_text(two["id_ed25519"])
        intruder.chmod(0o600)
        common = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
                  "-o", "ConnectTimeout=5", "-p", "12345", f"{BASE_IMAGE_USER}@{worker_ip}", "true"]
        other_job = subprocess.run(["ssh", "-i", str(intruder), "-o", "IdentitiesOnly=yes", *common],
                                   capture_output=True, text=True)
        assert other_job.returncode == 255 and "Permission denied (publickey)" in other_job.stderr
        password = subprocess.run(["ssh", "-o", "PreferredAuthentications=password,keyboard-interactive",
                                   "-o", "PubkeyAuthentication=no", *common], capture_output=True, text=True)
        assert password.returncode == 255 and "Permission denied (publickey)" in password.stderr
        own = tmp_path / "own"
        own.write_text(one["id_ed25519"])
        own.chmod(0o600)
        allowed = subprocess.run(["ssh", "-i", str(own), "-o", "IdentitiesOnly=yes", *common],
                                 capture_output=True, text=True)
        assert allowed.returncode == 0, allowed.stderr

        release_ranks(tmp_path)
        for job in ("one", "two"):
            assert jobs.exit_code(job) == 0, jobs.report(job)
            assert "PRIVATE KEY" not in jobs.logs(job)


def test_images_carry_no_keys():
    for dockerfile in (REPO / "base_image" / "Dockerfile", REPO / "manager_image" / "Dockerfile"):
        text = dockerfile.read_text()
        assert "id_rsa" not in text and "id_ed25519" not in text and ".pem" not in text
    assert not list((REPO / "base_image").glob("*key*")) and not list((REPO / "base_image").glob("*.pem"))
