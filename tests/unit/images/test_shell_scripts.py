"""Every shell script passes shellcheck: the pod scripts as pods run them (placeholders
filled, POSIX sh, every severity), and the repository's own scripts (warnings and errors)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from distributetrain.core import exitcodes, manifests
from prerequisites import unavailable

REPOSITORY = Path(__file__).resolve().parents[3]
POD_SCRIPTS = {"worker": manifests.WORKER_SCRIPT, "chief": manifests.CHIEF_SCRIPT,
               "ssh-wrapper": manifests.SSH_WRAPPER_SCRIPT}
# Process tables of a worker (pid -> name): its shell, sshd's listener, and a chief's
# session, as OpenSSH names them before 9.8 (forked `sshd`) and from 9.8 on (`sshd-session`).
IDLE_WORKER = {1: "sh", 7: "sshd", 8: "sh", 90: "sleep"}
TRAINING_BEFORE_OPENSSH_9_8 = IDLE_WORKER | {31: "sshd", 32: "sshd", 33: "bash", 34: "python"}
TRAINING_FROM_OPENSSH_9_8 = IDLE_WORKER | {31: "sshd-session", 32: "sshd-session", 33: "bash", 34: "python"}


@pytest.fixture(scope="module")
def shellcheck():
    found = shutil.which("shellcheck")
    if found is None:
        unavailable("needs shellcheck (Debian package shellcheck; make setup installs it)")
    return found


def repository_scripts() -> list[str]:
    """Every *.sh but the pod scripts' templates (checked above, filled in)."""
    listed = subprocess.run(["git", "-C", str(REPOSITORY), "ls-files", "*.sh"], capture_output=True, text=True)
    paths = listed.stdout.split() if listed.returncode == 0 else [
        str(path.relative_to(REPOSITORY)) for path in REPOSITORY.rglob("*.sh")]
    return sorted(path for path in paths if "/podscripts/" not in path)


@pytest.mark.parametrize("name", sorted(POD_SCRIPTS))
def test_pod_scripts_pass_shellcheck_as_posix_sh(shellcheck, name):
    checked = subprocess.run([shellcheck, "--shell=sh", "-"], input=POD_SCRIPTS[name], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_repository_scripts_pass_shellcheck(shellcheck):
    scripts = repository_scripts()
    assert "manager_image/manager.sh" in scripts
    checked = subprocess.run([shellcheck, "--severity=warning", *scripts], cwd=REPOSITORY,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def chief_connected(tmp_path: Path, processes: dict[int, str]) -> bool:
    """Whether the worker's own check sees a chief in this fake /proc."""
    for pid, name in processes.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(name + "\n")
    (tmp_path / "self").mkdir()  # /proc's other entries are no processes
    checked = subprocess.run(["sh", "-c", manifests.SSHD_SESSIONS_SCRIPT + 'chief_connected "$1"', "sh", str(tmp_path)])
    return checked.returncode == 0


@pytest.mark.parametrize("processes,connected", [
    (IDLE_WORKER, False), (TRAINING_BEFORE_OPENSSH_9_8, True), (TRAINING_FROM_OPENSSH_9_8, True),
    (IDLE_WORKER | {31: "sshd-session"}, True),
], ids=["idle", "openssh-before-9.8", "openssh-9.8-and-later", "one-session"])
def test_a_worker_sees_a_chief_s_sessions_whatever_the_openssh_version(tmp_path, processes, connected):
    assert "chief_connected /proc" in manifests.WORKER_SCRIPT
    assert chief_connected(tmp_path, processes) is connected


def test_a_pod_whose_user_the_image_lacks_fails_in_one_line(tmp_path):
    # `id` as in an image with no /etc/passwd entry for the pod's uid.
    fake_id = tmp_path / "id"
    fake_id.write_text('#!/bin/sh\nif [ "$1" = -un ]; then echo "id: cannot find name for user ID 1000" >&2; exit 1; fi\n'
                       'echo 1000\n')
    fake_id.chmod(0o755)
    checked = subprocess.run(["sh", "-c", manifests.JOB_USER_CHECK_SCRIPT], env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
                             capture_output=True, text=True)
    assert checked.returncode == exitcodes.IMAGE_UNFIT
    assert checked.stderr.count("\n") == 1 and "has no user with uid" in checked.stderr


def test_shellcheck_finds_a_broken_script(shellcheck):
    checked = subprocess.run([shellcheck, "--shell=sh", "-"], input='echo $undefined_quote"\n',
                             capture_output=True, text=True)
    assert checked.returncode != 0
