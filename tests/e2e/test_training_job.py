"""End to end: real Horovod training across pods over SSH, through the manager pod."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from distributetrain.core import names
from jobharness import REPO, node_pool, script_volume
from harness.polling import poll_until

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

TRAIN_ARGS = ("--epochs=3", "--samples=1536")
EPOCH_LINE = re.compile(r"epoch=(\d+) loss=([0-9.]+) accuracy=([0-9.]+) samples_per_sec=([0-9.]+) size=(\d+)")


def training_args(pool, *extra, script_args=TRAIN_ARGS):
    return ["--num-gpus=3", "--image=distributetrain/base:0.1.0", f"--node-selector={pool.selector}",
            "--worker-ready-timeout=90s", *extra, "--", *script_args]


def test_three_gpus_over_2_1_train_and_clean_up(cluster, jobs):
    with node_pool(cluster, {"a": 2, "b": 1}) as pool:
        jobs.submit("train", training_args(pool))
        assert jobs.exit_code("train", timeout_s=300) == 0, jobs.report("train")
        chief = jobs.pod("train-chief")
        assert chief["spec"]["nodeName"] == pool.node("b")  # the chief takes the last, smallest share
        epochs = [EPOCH_LINE.search(line) for line in jobs.logs("train-chief").splitlines()]
        epochs = [m for m in epochs if m]
        assert [int(m.group(1)) for m in epochs] == [1, 2, 3]
        assert {int(m.group(5)) for m in epochs} == {3}  # Horovod size 3 across the two pods
        losses = [float(m.group(2)) for m in epochs]
        assert losses[-1] < losses[0]  # it learns
        jobs.wait_gone(["train-worker-0"])
        assert jobs.secrets("train-") == []
        assert jobs.pod("train")["metadata"]["annotations"]["distributetrain.io/plan"] == \
            f"{pool.node('a')}=2,{pool.node('b')}=1"


def test_failing_training_script_fails_the_job_with_the_chiefs_code(cluster, jobs):
    with node_pool(cluster, {"a": 2, "b": 1}) as pool:
        # An unreadable data directory: train.py raises, prints a traceback and exits 1.
        # Restarts allowed, but the script's own failure is never retried.
        jobs.submit("broken", training_args(pool, "--max-restarts=1",
                                            script_args=("--epochs=1", "--data-dir=/nonexistent")))
        code = jobs.exit_code("broken", timeout_s=300)
        assert code == 1
        assert "chief exited with code 1" in jobs.logs("broken")
        annotations = jobs.pod("broken")["metadata"]["annotations"]
        assert annotations["distributetrain.io/exit-code"] == "1"
        assert "distributetrain.io/restarts" not in annotations
        jobs.wait_gone(["broken-worker-0"])
        assert jobs.secrets("broken-") == []


def test_pvc_for_script_data_and_checkpoints_keeps_the_checkpoint(cluster, api_client, namespace, jobs, tmp_path):
    files = {"train.py": (REPO / "base_image" / "train.py").read_text()}
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, files, tmp_path) as claim:
        volume = tmp_path / "volume"
        subprocess.run([sys.executable, str(REPO / "base_image" / "make_dataset.py"), "--output-dir",
                        str(volume / "data"), "--train-samples", "1024", "--test-samples", "256"], check=True)
        (volume / "checkpoints").mkdir()
        os.chown(volume / "checkpoints", names.JOB_USER_UID, names.JOB_USER_UID)  # the job's user writes there
        args = training_args(pool, f"--pvc={claim}:/train", "--filename=/train/train.py", "--delete-chief",
                             script_args=("--epochs=2", "--data-dir=/train/data",
                                          "--checkpoint-dir=/train/checkpoints"))
        args[0] = "--num-gpus=2"
        jobs.submit("pvc", args)
        assert jobs.exit_code("pvc", timeout_s=300) == 0, jobs.report("pvc")
        jobs.wait_gone(["pvc-worker-0", "pvc-chief"])
        saved = sorted(p.name for p in (volume / "checkpoints").iterdir())
        assert any(name.startswith("checkpoint-0002") for name in saved), saved
    shutil.rmtree(volume, ignore_errors=True)


CHECKPOINT_LINE = re.compile(r"checkpoint=\S+ epoch=(\d+) rank=0")
RESUMED_LINE = re.compile(r"resumed epoch=(\d+) checkpoint_dir=")
RESTART_PORT = 23456  # the workers' sshd, so the test can kill exactly this job's


def wait_for_match(jobs, pod, pattern, timeout_s=300.0):
    return poll_until(lambda: pattern.search(jobs.log_tail(pod, lines=100000)), timeout_s,
                      lambda: f"{pattern.pattern!r} from {pod}:\n{jobs.log_tail(pod)}")


def test_a_restart_resumes_training_from_the_last_checkpoint(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1, "c": 1}) as pool, \
            script_volume(api_client, namespace, {"README": "checkpoints of the job\n"}, tmp_path) as claim:
        args = training_args(pool, f"--pvc={claim}:/train", "--max-restarts=1", f"--port={RESTART_PORT}",
                             script_args=("--epochs=12", "--samples=512", "--checkpoint-dir=/train/checkpoints"))
        args[0] = "--num-gpus=2"
        jobs.submit("resume", args)
        first_saved = int(wait_for_match(jobs, "resume-chief", CHECKPOINT_LINE).group(1))
        # The worker's sshd and the rank under it die at once, as when its node fails.
        subprocess.run(["pkill", "-KILL", "-f", f"sshd -D -e -f /dev/null -p {RESTART_PORT}"], check=True)
        assert jobs.exit_code("resume", timeout_s=400) == 0, jobs.log_tail("resume")
        annotations = jobs.pod("resume")["metadata"]["annotations"]
        assert annotations["distributetrain.io/restarts"] == "1"
        assert annotations["distributetrain.io/last-restart-reason"].startswith("pod resume-worker-0 ")
        # The second attempt (fresh names) started after the last checkpoint of the first.
        second = jobs.logs("resume-chief-r1")
        resumed = RESUMED_LINE.search(second)
        assert resumed and int(resumed.group(1)) >= first_saved, second
        epochs = [int(m.group(1)) for m in EPOCH_LINE.finditer(second)]
        assert epochs[0] == int(resumed.group(1)) + 1 and epochs[-1] == 12, second
        jobs.wait_gone(["resume-worker-0", "resume-worker-0-r1"])
        assert jobs.secrets("resume-") == []
