"""The job's processes run from the images users deploy, not from this machine.

Found on the host by their command lines while a job runs: the manager's Python runs
as uid 65532 in the manager image, the workers' sshd and the chief's horovodrun as uid 1000
in the base image, each in a root filesystem of its own (not the host's, not the checkout).
"""

import os
import re
from pathlib import Path

import pytest

from distributetrain.core import names
from jobharness import SCRIPTS, job_args, node_pool, release_ranks, script_volume
from harness.polling import poll_until

pytestmark = pytest.mark.cluster

FIND_TIMEOUT_S = 120.0


def processes(pattern: str) -> list[int]:
    """Pids on the host whose command line matches ``pattern``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if re.search(pattern, command):
            found.append(int(entry.name))
    return found


def wait_for_process(pattern: str) -> int:
    return poll_until(lambda: processes(pattern), FIND_TIMEOUT_S, f"a process matching {pattern!r}", 0.2)[0]


def uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))


def in_own_root(pid: int) -> Path:
    """The process's root filesystem, asserted not to be the host's."""
    root = Path(f"/proc/{pid}/root")
    assert not os.path.samefile(root, "/"), f"pid {pid} runs in the host's root filesystem"
    return root


def test_manager_workers_and_chief_run_from_their_images(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        # hello.py holds until released, so every process can be looked at.
        jobs.submit("imaged", job_args(pool, claim, 2, "--port=12399", script_args=("0", "hold")))
        sshd = wait_for_process(r"sshd -D -e -f /dev/null -p 12399")
        horovodrun = wait_for_process(r"horovodrun .*-p 12399")
        manager = wait_for_process(r"-m distributetrain post-training .*--port=12399")

        assert uid_of(manager) == 65532
        manager_root = in_own_root(manager)
        assert (manager_root / "usr/local/bin/manager.sh").exists()
        assert not (manager_root / "opt/distributetrain").exists()  # not the training image

        for pid in (sshd, horovodrun):
            root = in_own_root(pid)
            assert (root / "opt/distributetrain/train.py").exists()  # the base image's files
            assert not (root / str(Path(__file__).resolve().parents[2]).lstrip("/")).exists()
        assert os.readlink(f"/proc/{sshd}/exe") == "/usr/sbin/sshd"
        assert uid_of(sshd) == uid_of(horovodrun) == names.JOB_USER_UID
        release_ranks(tmp_path)
        assert jobs.exit_code("imaged") == 0, jobs.report("imaged")
        assert "running as uid 65532" in jobs.logs("imaged")
