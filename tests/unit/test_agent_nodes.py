"""The Node objects the agent registers: taints, hostname labels, and Ready through a kubelet restart."""

import datetime

import pytest

from localcluster.agent.nodes import Readiness, node_object, node_status
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


def test_a_node_named_unlike_its_hostname_is_labelled_and_addressed_by_its_hostname(tmp_path):
    agent = parse_args([
        "--kubeconfig", "kc", "--nodes", "ip-10-0-1-7.ec2.internal/ip-10-0-1-7=2", "--first-index", "3",
        "--state-dir", str(tmp_path), "--ca-file", "ca", "--kubelet-cert", "c", "--kubelet-key", "k",
    ])
    node = node_object(agent, agent.nodes[0], "v1.30.0", NOW)
    assert node["metadata"]["name"] == "ip-10-0-1-7.ec2.internal"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "ip-10-0-1-7"
    assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "10.233.0.13"},
                                           {"type": "Hostname", "address": "ip-10-0-1-7"}]


def test_a_restarting_kubelet_reports_not_ready_with_the_pleg_message(tmp_path):
    agent = settings(tmp_path)
    since = NOW + datetime.timedelta(minutes=5)
    status = node_status(agent, agent.nodes[0], "v1.30.0", NOW, since + datetime.timedelta(seconds=2),
                         Readiness(False, since))
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready == {
        "type": "Ready", "status": "False", "reason": "KubeletNotReady",
        "message": "PLEG is not healthy: pleg was last seen active 3m7s ago; threshold is 3m0s",
        "lastHeartbeatTime": "2024-01-01T00:05:02Z", "lastTransitionTime": "2024-01-01T00:05:00Z",
    }
    pressure = [c for c in status["conditions"] if c["type"] != "Ready"]
    assert {(c["status"], c["lastTransitionTime"]) for c in pressure} == {("False", "2024-01-01T00:00:00Z")}


def test_ready_again_after_the_restart_with_a_new_transition_time(tmp_path):
    agent = settings(tmp_path)
    back = NOW + datetime.timedelta(minutes=5)
    status = node_status(agent, agent.nodes[0], "v1.30.0", NOW, back, Readiness(True, back))
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "True", "KubeletReady", "2024-01-01T00:05:00Z")
