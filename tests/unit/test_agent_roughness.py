"""The local cluster's rough edges, in the parts that need no cluster: node specs with
hostnames, slow pulls and a node's image cache, kubelet restart requests, Go durations."""

import pytest

from localcluster.__main__ import EXIT_BAD_INPUT, main, parse_pull_delays
from localcluster.agent import controls
from localcluster.agent.gotime import go_duration
from localcluster.agent.images import NodeImages, Pull, pulled_message
from localcluster.nodegroups import NodeAllocationError, parse_node_spec, validate_hostnames

IMAGE = "distributetrain/base:0.1.0"


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (185, "3m5s"), (180, "3m0s"), (5.002, "5.002s"), (3600, "1h0m0s"), (3723.5, "1h2m3.5s"),
    (0.12, "120ms"), (0.0000015, "1.5µs"), (-2, "-2s"),
])
def test_durations_read_as_go_prints_them(seconds, text):
    assert go_duration(seconds) == text


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


def test_a_kubelet_restart_request_is_taken_once(tmp_path):
    controls.request_kubelet_restart(tmp_path, "ip-10-0-1-7.ec2.internal", 5)
    assert controls.take_kubelet_restarts(tmp_path) == {"ip-10-0-1-7.ec2.internal": 5.0}
    assert controls.take_kubelet_restarts(tmp_path) == {}


def test_a_node_s_pull_delays_override_the_cluster_s(tmp_path):
    cluster_file, node_file = tmp_path / "cluster.json", tmp_path / "node.json"
    controls.write_pull_delays(cluster_file, {IMAGE: 60, "other:1": 5})
    controls.write_pull_delays(node_file, {IMAGE: 0})
    assert controls.read_pull_delays(cluster_file, node_file, tmp_path / "absent.json") == {IMAGE: 0, "other:1": 5}


def node_images(tmp_path, delays):
    controls.write_pull_delays(tmp_path / "delays.json", delays)
    return NodeImages(tmp_path / "pulled", (None, tmp_path / "delays.json"))


def test_a_slow_pull_is_waited_for_once_per_node(tmp_path):
    images = node_images(tmp_path, {IMAGE: 5})
    pull = images.pull(IMAGE, now=100.0)
    assert pull == Pull(IMAGE, requested_at=100.0, started_at=100.0, done_at=105.0)
    assert images.pull(IMAGE, now=103.0) == pull, "a second pod waits for the same pull"
    assert images.pull(IMAGE, now=105.0) is None
    assert images.pull(IMAGE, now=200.0) is None, "the node keeps what it pulled"
    assert NodeImages(tmp_path / "pulled", ()).pull(IMAGE, now=0.0) is None, "its cache outlives the agent"


def test_pulls_on_a_node_run_one_at_a_time(tmp_path):
    images = node_images(tmp_path, {IMAGE: 5, "other:1": 3})
    images.pull(IMAGE, now=100.0)
    assert images.pull("other:1", now=101.0) == Pull("other:1", requested_at=101.0, started_at=105.0, done_at=108.0)


def test_a_node_that_forgets_its_images_pulls_again(tmp_path):
    images = node_images(tmp_path, {IMAGE: 5})
    images.pull(IMAGE, now=100.0)
    assert images.pull(IMAGE, now=105.0) is None
    (tmp_path / "pulled").unlink()
    assert images.pull(IMAGE, now=110.0) == Pull(IMAGE, requested_at=110.0, started_at=110.0, done_at=115.0)


def test_images_without_a_delay_are_there_at_once_and_cached(tmp_path):
    images = node_images(tmp_path, {})
    assert images.pull(IMAGE, now=100.0) is None
    controls.write_pull_delays(tmp_path / "delays.json", {IMAGE: 5})
    assert images.pull(IMAGE, now=101.0) is None, "a delay set later does not empty the cache"


def test_pulled_event_message_is_the_kubelet_s():
    pull = Pull(IMAGE, requested_at=10.0, started_at=12.0, done_at=17.002)
    assert pulled_message(pull, 123456) == (
        f'Successfully pulled image "{IMAGE}" in 5.002s (7.002s including waiting). Image size: 123456 bytes.')
