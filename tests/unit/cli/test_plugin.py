"""`kubectl distributetrain …`: the CLI's second console script, a kubectl plugin."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from distributetrain.cli import main as cli
from distributetrain.cli.jobs import plugin

REPO = Path(__file__).resolve().parents[3]


def test_both_console_scripts_run_the_same_main():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"distributetrain": "distributetrain.cli.main:main",
                       "kubectl-distributetrain": "distributetrain.cli.main:main"}


@pytest.mark.parametrize("argv0,program", [
    ("/usr/local/bin/kubectl-distributetrain", "kubectl distributetrain"),
    ("kubectl-distributetrain", "kubectl distributetrain"),
    ("/venv/bin/distributetrain", "distributetrain"),
    ("/usr/lib/python3/distributetrain/__main__.py", "distributetrain"),
])
def test_program_name(argv0, program):
    assert plugin.program_name(argv0) == program


def test_help_names_the_kubectl_command(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/kubectl-distributetrain", "list", "--help"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage: kubectl distributetrain list [-h]")
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/kubectl-distributetrain", "status"])
    assert cli.main() == 2
    assert capsys.readouterr().err == ("distributetrain: error: NAME: is required "
                                       "(see 'kubectl distributetrain status --help')\n")


def test_the_installed_plugin_runs_and_parses():
    executable = Path(sys.executable).with_name(plugin.KUBECTL_PLUGIN_EXECUTABLE)
    assert executable.is_file(), f"{executable} is missing: reinstall the package (pip install -e .)"
    helped = subprocess.run([str(executable), "logs", "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: kubectl distributetrain logs"), helped
    refused = subprocess.run([str(executable), "list", "-o", "yaml"], capture_output=True, text=True, timeout=60)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == ("distributetrain: error: -o: invalid choice: 'yaml' (choose from 'table', 'json') "
                              "(see 'kubectl distributetrain list --help')\n")
