"""The Node objects the agent registers, and the taints it is told to give them."""

import datetime

import pytest

from localcluster.agent.nodes import node_object
from localcluster.agent.settings import parse_args, parse_taints

NOW = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)


def settings(tmp_path, *extra):
    return parse_args([
        "--kubeconfig", "kc", "--nodes", "gpu-a=4", "--first-index", "3", "--state-dir", str(tmp_path),
        "--ca-file", "ca", "--kubelet-cert", "c", "--kubelet-key", "k", *extra,
    ])


def test_nodes_register_with_the_agent_s_taints(tmp_path):
    agent = settings(tmp_path, "--taints", "nvidia.com/gpu=present:NoSchedule")
    node = node_object(agent, agent.nodes[0], "v1.30.0", NOW)
    assert node["spec"] == {"podCIDR": "10.233.3.0/24", "podCIDRs": ["10.233.3.0/24"],
                            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}


def test_nodes_register_untainted_by_default(tmp_path):
    agent = settings(tmp_path)
    assert "taints" not in node_object(agent, agent.nodes[0], "v1.30.0", NOW)["spec"]


def test_taints_in_kubectl_taint_form():
    assert parse_taints("nvidia.com/gpu=present:NoSchedule,dedicated:NoExecute") == (
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "dedicated", "effect": "NoExecute"},
    )
    assert parse_taints("") == ()


@pytest.mark.parametrize("text", ["nvidia.com/gpu", "k=v", "k:Sometimes", ":NoSchedule"])
def test_bad_taints_are_refused_with_the_format(text):
    with pytest.raises(ValueError, match=r"key\[=value\]:NoSchedule"):
        parse_taints(text)
