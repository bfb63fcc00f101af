"""The user's commands at the edge: every bad input is one line naming the flag, exit
code 2, and no API call at all (the client points at an address nothing listens on)."""

import pytest
import yaml
from kubernetes import client

from distributetrain.cli import main as cli
from distributetrain.cli.jobs import commands, connection, manager_spec
from distributetrain.cli.jobs.api import JobsKube
from distributetrain.core import errors
from distributetrain.core.clock import FakeClock

UNREACHABLE = "https://127.0.0.1:9"  # the discard port: nothing answers
SUBMIT = ["submit", "--num-gpus", "2", "--image", "reg/base:1", "--namespace", "ml"]
KUBECONFIG = """\
apiVersion: v1
kind: Config
current-context: plain
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts:
  - {name: plain, context: {cluster: c, user: u}}
  - {name: team, context: {cluster: c, user: u, namespace: team-a}}
"""


@pytest.fixture
def unreachable(monkeypatch):
    """Every command's client: counts requests, and could not complete one anyway."""
    configuration = client.Configuration()
    configuration.host = UNREACHABLE
    kube = JobsKube(client.ApiClient(configuration), FakeClock())
    monkeypatch.setattr(connection, "connect", lambda args, clock: kube)
    return kube


def run(capsys, argv):
    code = cli.dispatch(argv, FakeClock())
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("argv,flag", [
    (SUBMIT[:1] + SUBMIT[3:], "--num-gpus"),
    (SUBMIT + ["--num-gpus", "0"], "--num-gpus"),
    (SUBMIT + ["--image", "Bad Image"], "--image"),
    (SUBMIT + ["--port", "70000"], "--port"),
    (SUBMIT + ["--pvc", "data"], "--pvc"),
    (SUBMIT + ["--namespace", "Bad.NS"], "--namespace"),
    (SUBMIT + ["--wait-for-gpus", "soon"], "--wait-for-gpus"),
    (SUBMIT + ["--filename", "train.py"], "--filename"),
    (SUBMIT + ["--name", "Not_DNS"], "--name"),
    (SUBMIT + ["--name", "x" * 51], "--name"),
    (SUBMIT + ["--name", "x" * 45, "--as-job"], "--name"),
    (SUBMIT + ["--job-name", "x"], "--job-name"),
    (SUBMIT + ["--owner-uid", "u"], "--owner-uid"),
    (SUBMIT + ["--ttl-after-finished", "1h"], "--ttl-after-finished"),
    (SUBMIT + ["--as-job", "--ttl-after-finished", "a day"], "--ttl-after-finished"),
    (SUBMIT + ["--manager-image", "Bad Image"], "--manager-image"),
    (SUBMIT + ["--manager-service-account", "Bad_SA"], "--manager-service-account"),
    (SUBMIT + ["--manager-node-selector", "pool"], "--manager-node-selector"),
    (SUBMIT + ["--dry-run", "--follow"], "--follow"),
    (SUBMIT + ["--frobnicate"], "--frobnicate"),
    (["list", "-o", "yaml"], "-o"),
    (["list", "--", "x"], "--"),
    (["status"], "NAME"),
    (["logs", "demo", "--", "x"], "--"),
    (["cancel", "demo", "--timeout", "soon"], "--timeout"),
])
def test_bad_input_is_one_line_naming_the_flag_and_calls_nothing(capsys, unreachable, argv, flag):
    code, out, err = run(capsys, argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith(f"distributetrain: error: {flag}"), err
    assert unreachable.requests == 0


def test_dry_run_prints_the_manager_and_connects_to_nothing(capsys, monkeypatch):
    def refuse(args, clock):
        raise AssertionError("a dry run must not connect")

    monkeypatch.setattr(connection, "connect", refuse)
    code, out, err = run(capsys, SUBMIT + ["--name", "demo", "--dry-run", "--", "--epochs", "1"])
    assert (code, err) == (0, "")
    args = cli.build_parser().parse_args(SUBMIT + ["--name", "demo"])
    assert yaml.safe_load(out) == manager_spec.manager_object(
        *commands.submission(args, ["--epochs", "1"]))


class Unreachable:
    """What every call does once ``kube.call`` has retried past its deadline."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise errors.TransientApiError("cannot reach the Kubernetes API: connection refused")

        return fail


@pytest.mark.parametrize("argv", [["status", "demo"], ["list"], ["logs", "demo"], ["cancel", "demo"],
                                  SUBMIT + ["--name", "demo"]])
def test_api_failure_is_one_line_and_its_exit_code(capsys, monkeypatch, argv):
    monkeypatch.setattr(connection, "connect", lambda args, clock: Unreachable())
    code, out, err = run(capsys, argv + ["--namespace", "ml"] if argv[0] != "submit" else argv)
    assert (code, out) == (76, "")
    assert err.startswith("distributetrain: error: cannot reach the Kubernetes API") and err.count("\n") == 1


def namespace_for(tmp_path, monkeypatch, *flags):
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return connection.namespace_of(cli.build_parser().parse_args(["list", "--kubeconfig", str(path), *flags]))


def test_namespace_comes_from_the_flag_then_the_context_then_default(tmp_path, monkeypatch):
    assert namespace_for(tmp_path, monkeypatch) == "default"
    assert namespace_for(tmp_path, monkeypatch, "--context", "team") == "team-a"
    assert namespace_for(tmp_path, monkeypatch, "--context", "team", "-n", "ml") == "ml"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert connection.namespace_of(cli.build_parser().parse_args(["list"])) == "default"


def test_missing_kubeconfig_names_the_flag(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, out, err = run(capsys, ["list", "--kubeconfig", str(tmp_path / "missing")])
    assert (code, out) == (2, "")
    assert err.startswith("distributetrain: error: --kubeconfig: cannot load") and err.count("\n") == 1
