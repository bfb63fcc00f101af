"""kube-router's command line on a node: its firewall only, for that node, on the cluster's Services."""

from pathlib import Path

from localcluster import networkpolicy


def test_kube_router_is_a_network_policy_controller_only():
    assert networkpolicy.command(Path("/cache/kube-router"), Path("/run/n1/kube-router.kubeconfig"), "gpu-a") == [
        "/cache/kube-router", "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
        "--kubeconfig=/run/n1/kube-router.kubeconfig", "--hostname-override=gpu-a",
        "--service-cluster-ip-range=10.96.0.0/16", "--health-port=0", "--metrics-port=0", "--v=1"]
