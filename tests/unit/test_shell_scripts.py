"""Every shell script passes shellcheck: the pod scripts as pods run them (placeholders
filled, POSIX sh, every severity), and the repository's own scripts (warnings and errors)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from distributetrain.core import manifests
from prerequisites import unavailable

REPOSITORY = Path(__file__).resolve().parents[2]
POD_SCRIPTS = {"worker": manifests.WORKER_SCRIPT, "chief": manifests.CHIEF_SCRIPT,
               "ssh-wrapper": manifests.SSH_WRAPPER_SCRIPT}


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


def test_shellcheck_finds_a_broken_script(shellcheck):
    checked = subprocess.run([shellcheck, "--shell=sh", "-"], input='echo $undefined_quote"\n',
                             capture_output=True, text=True)
    assert checked.returncode != 0
