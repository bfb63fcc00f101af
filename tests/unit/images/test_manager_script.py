"""manager.sh's phases and signals, run for real with a stand-in `python` on PATH that
records which phase ran and acts out the timing under test; and with the real interpreter,
from a working directory holding code of a tenant's."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MANAGER_SH = Path(__file__).resolve().parents[3] / "manager_image" / "manager.sh"


def fake_python(tmp_path: Path, body: str) -> dict[str, str]:
    """A `python` whose `-I -m distributetrain PHASE` (isolated: see below) appends PHASE to
    phases.log, then runs body (a sh snippet; $phase is the phase). The version query
    prints nothing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "python"
    script.write_text(textwrap.dedent("""\
        #!/bin/sh
        [ "$1" = "-I" ] && [ "$2" = "-m" ] || exit 0
        phase="$4"
        echo "$phase" >> "{log}"
        {body}
        """).format(log=tmp_path / "phases.log", body=body))
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def run_manager(tmp_path: Path, body: str, timeout_s: float = 20) -> tuple[int, list[str]]:
    env = fake_python(tmp_path, body)
    result = subprocess.run(["sh", str(MANAGER_SH), "--num-gpus=2"], env=env, capture_output=True, timeout=timeout_s)
    log = tmp_path / "phases.log"
    return result.returncode, log.read_text().split() if log.exists() else []


def test_phases_run_in_order_and_the_exit_code_is_post_trainings(tmp_path):
    code, phases = run_manager(tmp_path, '[ "$phase" = post-training ] && exit 7; exit 0')
    assert (code, phases) == (7, ["pre-training", "post-training"])


def test_bad_input_in_pre_training_stops_at_once(tmp_path):
    assert run_manager(tmp_path, "exit 2") == (2, ["pre-training"])


def test_a_crashed_pre_training_is_followed_by_teardown(tmp_path):
    code, phases = run_manager(tmp_path, '[ "$phase" = pre-training ] && exit 1; exit 0')
    assert (code, phases) == (1, ["pre-training", "teardown"])


def test_sigterm_during_a_phase_is_forwarded_to_it(tmp_path):
    # post-training is the manager.sh's child: it signals its parent, then reports what it got.
    body = """
    if [ "$phase" = post-training ]; then
      trap 'echo got-TERM >> "$(dirname "$0")/../phases.log"; exit 143' TERM
      kill -TERM $PPID
      sleep 10 >/dev/null 2>&1 & wait $!  # its own output: an orphaned sleep would hold the pipes open
      exit 0
    fi
    exit 0"""
    code, phases = run_manager(tmp_path, body)
    assert (code, phases) == (143, ["pre-training", "post-training", "got-TERM", "teardown"])


@pytest.mark.parametrize("trial", range(5))
def test_sigterm_as_pre_training_finishes_never_starts_training(tmp_path, trial):
    """The pod is deleted just as pre-training ends successfully (the chief was created):
    post-training must not start; the job is torn down and the exit says SIGTERM."""
    body = """
    if [ "$phase" = pre-training ]; then
      trap '' TERM
      kill -TERM $PPID
      exit 0
    fi
    exit 0"""
    code, phases = run_manager(tmp_path, body)
    assert (code, phases) == (128 + signal.SIGTERM, ["pre-training", "teardown"])


# What a tenant's pod spec could put in the manager's working directory (a volume made its
# workingDir): a package named distributetrain, and a module the version query's
# importlib.metadata imports. Each would leave a marker if it ran.
PLANTED = {
    "distributetrain/__init__.py": "open('planted-package-ran', 'w').close()\n",
    "distributetrain/__main__.py": "open('planted-main-ran', 'w').close()\n",
    "csv.py": "open('planted-csv-ran', 'w').close()\n",
}


def test_no_interpreter_imports_from_the_working_directory(tmp_path):
    """manager.sh with the real interpreter (this one, 3.11 as in the image), run from a
    directory of planted code: the manager's own package answers (bad input: exit 2, its
    one-line error) and nothing planted ran."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # A script, not a link: the interpreter finds its virtualenv from the path it runs as.
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bin_dir / "python").chmod(0o755)
    workdir = tmp_path / "workdir"
    for name, code in PLANTED.items():
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_text(code)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    result = subprocess.run(["sh", str(MANAGER_SH), "--num-gpus=0", "--image=img"], cwd=workdir, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "distributetrain: error: " in result.stderr
    assert sorted(p.name for p in workdir.iterdir()) == ["csv.py", "distributetrain"]
