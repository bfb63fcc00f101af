"""Every shell script passes shellcheck: the pod scripts as pods run them (placeholders
filled, POSIX sh, every severity), and the repository's own scripts (warnings and errors).
The pod scripts' own functions run here too: a worker's check for a connected chief, and
the pod's user, known to ssh under any UID (run as that UID, with the host's nss_wrapper
and ssh; tests/e2e/test_horovod_local.py runs sshd so, in the base image)."""

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from distributetrain.core import exitcodes
from distributetrain.core.pods import manifests, podscripts
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


# A UID of an OpenShift namespace's range: no /etc/passwd has it. GID 0, as OpenShift runs it.
ASSIGNED_UID = 1000680000
NO_SUCH_LIBRARY = "/nonexistent/libnss_wrapper.so"


@pytest.fixture
def scratch():
    """The pod's scratch volume: an emptyDir, which any UID may write."""
    path = Path(tempfile.mkdtemp(prefix="dt-scratch-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def as_user(uid: int, gid: int, script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``script`` run by sh as ``uid``:``gid`` with no other group, as a pod's process runs."""
    if os.geteuid() != 0:
        unavailable("runs the pod scripts under other UIDs (setpriv): needs root")
    if shutil.which("setpriv") is None:
        unavailable("needs setpriv (Debian package util-linux)")
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "sh", "-c", script],
                          env={"PATH": "/usr/bin:/bin", **(env or {})}, capture_output=True, text=True)


def job_user_script(scratch: Path, libraries: tuple[str, ...] = manifests.NSS_WRAPPER_LIBRARIES) -> str:
    return podscripts.load("job-user.sh", SCRATCH=str(scratch), NSS_WRAPPER_LIBRARIES=" ".join(libraries),
                           IMAGE_UNFIT=str(exitcodes.IMAGE_UNFIT))


@pytest.fixture
def nss_wrapper():
    if not any(glob.glob(pattern) for pattern in manifests.NSS_WRAPPER_LIBRARIES):
        unavailable("needs nss_wrapper (Debian package libnss-wrapper; make setup installs it)")


def test_a_uid_without_a_passwd_entry_is_a_user_ssh_knows(nss_wrapper, scratch):
    """OpenShift's assigned UID, unknown to the image: ssh (as the chief's, horovodrun's) finds
    its user through nss_wrapper, and its home is on the scratch volume."""
    assert as_user(ASSIGNED_UID, 0, "ssh -G worker").stderr.strip() == f"No user exists for uid {ASSIGNED_UID}"
    checked = as_user(ASSIGNED_UID, 0, job_user_script(scratch) + "id -un; id -gn; echo $HOME; touch ~/written; "
                      "ssh -G -p 12345 worker | grep '^user '", {"HOME": "/"})
    assert checked.returncode == 0, checked.stderr
    home = f"{scratch}/distributetrain-home"
    assert checked.stdout.splitlines() == [f"distributetrain-{ASSIGNED_UID}", "root", home,
                                           f"user distributetrain-{ASSIGNED_UID}"]
    assert (Path(home) / "written").stat().st_uid == ASSIGNED_UID
    # The image's users are all still there: the entry is added, not alone.
    passwd = (scratch / "distributetrain-nss" / "passwd").read_text()
    assert passwd.startswith(Path("/etc/passwd").read_text().rstrip("\n") + "\n")
    entry = f"distributetrain-{ASSIGNED_UID}:x:{ASSIGNED_UID}:0:distributetrain job user:{home}:/bin/sh\n"
    assert passwd.endswith(entry)


def test_a_gid_without_a_group_entry_gets_one(nss_wrapper, scratch):
    checked = as_user(ASSIGNED_UID, ASSIGNED_UID, job_user_script(scratch) + "id -gn")
    assert checked.stdout.strip() == f"distributetrain-{ASSIGNED_UID}", checked.stderr


def test_a_user_whose_home_is_not_writable_gets_one_on_the_scratch_volume(scratch):
    """The image's user under a read-only root filesystem: its entry stays, its home moves."""
    nobody = pwd.getpwnam("nobody")
    checked = as_user(nobody.pw_uid, nobody.pw_gid, job_user_script(scratch) + "id -un; echo $HOME; echo $LD_PRELOAD",
                      {"HOME": nobody.pw_dir})
    assert checked.stdout.splitlines() == ["nobody", f"{scratch}/distributetrain-home", ""], checked.stderr


def test_an_image_that_cannot_give_the_uid_a_user_fails_in_one_line(scratch):
    checked = as_user(ASSIGNED_UID, 0, job_user_script(scratch, (NO_SUCH_LIBRARY,)) + "echo went on")
    assert checked.returncode == exitcodes.IMAGE_UNFIT and checked.stdout == ""
    assert checked.stderr == (f"distributetrain: the image has no user with uid {ASSIGNED_UID} and no nss_wrapper to "
                              "give it one (install libnss-wrapper, as base_image/ does, or add an /etc/passwd entry): "
                              "ssh and sshd cannot run without one\n")


def test_shellcheck_finds_a_broken_script(shellcheck):
    checked = subprocess.run([shellcheck, "--shell=sh", "-"], input='echo $undefined_quote"\n',
                             capture_output=True, text=True)
    assert checked.returncode != 0
