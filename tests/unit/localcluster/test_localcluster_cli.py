"""The local cluster's command line, in the parts that need no cluster: node specs with
hostnames, slow-registry delays, and bad input refused before anything starts."""

import pytest

from localcluster.__main__ import EXIT_BAD_INPUT, main, parse_pull_delays
from localcluster.nodegroups import NodeAllocationError, parse_node_spec, validate_hostnames

IMAGE = "distributetrain/base:0.1.0"


def test_node_spec_gives_gpus_by_name_and_the_hostnames_that_differ():
    assert parse_node_spec("ip-10-0-1-7.ec2.internal/ip-10-0-1-7=2, gpu-b=2, gpu-c/gpu-c=1") == (
        {"ip-10-0-1-7.ec2.internal": 2, "gpu-b": 2, "gpu-c": 1}, {"ip-10-0-1-7.ec2.internal": "ip-10-0-1-7"})


@pytest.mark.parametrize("text", ["gpu-a:4", "gpu-a/=1", "a/B=1", "a/x=1,b/x=1", "a/b=1,b=1"])
def test_bad_node_specs_are_refused(text):
    with pytest.raises(ValueError):
        parse_node_spec(text)


def test_hostnames_only_for_requested_nodes():
    with pytest.raises(NodeAllocationError, match="not requested: ghost"):
        validate_hostnames({"a": 1}, {"ghost": "g"})


def test_pull_delays_by_image():
    assert parse_pull_delays(f"{IMAGE}=60, registry:5000/x/y:1=0.5") == {IMAGE: 60.0, "registry:5000/x/y:1": 0.5}


@pytest.mark.parametrize("text", [IMAGE, f"{IMAGE}=soon", f"{IMAGE}=-1", "=5", f"{IMAGE}=inf"])
def test_bad_pull_delays_are_refused_with_the_format(text):
    with pytest.raises(ValueError, match="IMAGE=SECONDS"):
        parse_pull_delays(text)


@pytest.mark.parametrize(("flag", "value", "form"), [
    ("--nodes", "gpu-a:4", "NAME[/HOSTNAME]=GPUS"), ("--slow-registry", "base=later", "IMAGE=SECONDS"),
    ("--labels", "pool", "key=value"),
])
def test_up_refuses_bad_input_in_one_line_before_starting_anything(capsys, tmp_path, monkeypatch, flag, value, form):
    monkeypatch.setenv("DT_RUN", str(tmp_path / "run"))
    assert main(["up", flag, value]) == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f"error: {flag}: ") and form in error, error
    assert not (tmp_path / "run").exists()


def test_status_where_no_cluster_ever_started_says_so(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DT_RUN", str(tmp_path / "run"))
    assert main(["status"]) == 0
    printed = capsys.readouterr().out
    assert "apiserver /readyz" in printed and "not ready" in printed, printed
