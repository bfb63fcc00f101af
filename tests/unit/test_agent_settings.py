"""The agent's command line: nodes, labels and binds parsed into values."""


import pytest

from localcluster.agent.settings import NodeSpec, parse_args, parse_labels, parse_nodes


def test_nodes_are_numbered_from_the_first_index():
    assert parse_nodes("gpu-a=4,gpu-b=2", 7) == (NodeSpec("gpu-a", 4, 7), NodeSpec("gpu-b", 2, 8))


def test_node_addresses_follow_the_index():
    node = NodeSpec("gpu-a", 4, 7)
    assert (node.ip, node.pod_cidr, node.netns, node.host_veth) == ("10.233.0.17", "10.233.7.0/24", "dt-n7", "dtn7")


def test_a_node_s_hostname_label_may_differ_from_its_name():
    assert parse_nodes("ip-10-0-1-7.ec2.internal/ip-10-0-1-7=2,gpu-b=1", 7) == (
        NodeSpec("ip-10-0-1-7.ec2.internal", 2, 7, hostname="ip-10-0-1-7"), NodeSpec("gpu-b", 1, 8, hostname="gpu-b"),
    )


@pytest.mark.parametrize("text", ["gpu-a", "gpu-a=x", "Gpu=1", "a=1,a=2", "", "a/=1", "a/B=1", "a/-x=1",
                                  "a/b/c=1", f"a/{'h' * 64}=1"])
def test_bad_nodes_are_refused_with_the_format(text):
    with pytest.raises(ValueError, match=r"name\[/hostname\]=gpus|duplicate"):
        parse_nodes(text, 1)


def test_index_beyond_the_network_is_refused():
    with pytest.raises(ValueError, match="outside 1..240"):
        parse_nodes("a=1,b=1", 240)


def test_labels():
    assert parse_labels("pool=a,zone=") == {"pool": "a", "zone": ""}
    assert parse_labels("") == {}


def test_the_launcher_command_line_parses(tmp_path):
    settings = parse_args([
        "--kubeconfig", "kc", "--nodes", "gpu-a=4,gpu-b=2", "--first-index", "3", "--labels", "k=v",
        "--gpu-resource", "example.com/gpu", "--state-dir", str(tmp_path), "--bridge", "dtbr0",
        "--apiserver-host", "10.233.0.1", "--apiserver-port", "6443", "--ca-file", "ca", "--kubelet-cert", "c",
        "--kubelet-key", "k", "--kubelet-port", "10250",
    ])
    assert [node.index for node in settings.nodes] == [3, 4]
    assert settings.ready_file == tmp_path / "ready"
