"""The job's NetworkPolicies, compared as whole objects, and how the manager creates and deletes them."""

from distributetrain.core import names
from distributetrain.core.pods import networkpolicy
from distributetrain.core.settings import JobSettings
from distributetrain.manager.pods import networkpolicy as manager_networkpolicy
from distributetrain.manager.watching.teardown import tear_down
from harness.builders import manager_pod
from harness.kube import FakeKube

SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=6, image="reg.example.com/base:1", owner_uid="uid-1",
                       discovery_url="http://10.0.0.9:8470/hosts")
LABELS = {"app.kubernetes.io/name": "distributetrain", "app.kubernetes.io/managed-by": "distributetrain",
          "distributetrain.io/job": "demo", "distributetrain.io/role": "network-policy",
          "distributetrain.io/owner-uid": "uid-1"}
OWNER = [{"apiVersion": "v1", "kind": "Pod", "name": "demo", "uid": "uid-1"}]
JOB_PODS = {"matchLabels": {"distributetrain.io/job": "demo", "distributetrain.io/owner-uid": "uid-1"}}


# Istio ambient (istio.io/latest/docs/ambient/usage/networkpolicy/): the kubelet's probes
# arrive from this address, and pods reach each other on HBONE's port.
AMBIENT_PROBES = {"ipBlock": {"cidr": "169.254.7.127/32"}}
HBONE = {"protocol": "TCP", "port": 15008}


def test_the_job_s_pods_admit_the_job_s_pods_alone_on_every_port_and_ambient_s_probes_on_sshd_s():
    assert networkpolicy.pods_policy(SETTINGS.replace(port=2222)) == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "demo-pods", "namespace": "ml", "labels": LABELS, "ownerReferences": OWNER},
        "spec": {"podSelector": JOB_PODS, "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"podSelector": JOB_PODS}]},
                             {"from": [AMBIENT_PROBES], "ports": [{"protocol": "TCP", "port": 2222}]}]},
    }


def test_the_manager_admits_the_job_s_pods_on_its_discovery_port_and_hbone_s_alone():
    assert networkpolicy.manager_policy(SETTINGS) == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "demo-manager", "namespace": "ml", "labels": LABELS, "ownerReferences": OWNER},
        "spec": {"podSelector": {"matchLabels": {"distributetrain.io/manager-uid": "uid-1"}},
                 "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"podSelector": JOB_PODS}],
                              "ports": [{"protocol": "TCP", "port": 8470}, HBONE]}]},
    }


def test_which_policies_a_job_gets():
    both = [networkpolicy.pods_policy(SETTINGS), networkpolicy.manager_policy(SETTINGS)]
    assert networkpolicy.job_policies(SETTINGS) == both
    assert networkpolicy.job_policies(SETTINGS.replace(network_policy=False)) == []
    # No NetworkPolicy applies to a pod on the node's network.
    assert networkpolicy.job_policies(SETTINGS.replace(host_network=True)) == []
    # The manager in another namespace: neither owned (no reference crosses namespaces) nor its own policy.
    elsewhere = SETTINGS.replace(manager_namespace="ops")
    assert networkpolicy.job_policies(elsewhere) == [
        {**networkpolicy.pods_policy(elsewhere), "metadata": {"name": "demo-pods", "namespace": "ml", "labels": LABELS}}]


def test_the_manager_labels_itself_then_creates_the_policies_and_teardown_deletes_them():
    kube = FakeKube(manager=manager_pod(name="demo", uid="uid-1"))
    manager_networkpolicy.isolate(kube, SETTINGS)
    assert kube.actions == [("patch", "Pod", "demo"), ("create", "NetworkPolicy", "demo-pods"),
                            ("create", "NetworkPolicy", "demo-manager")]
    assert kube.manager["metadata"]["labels"] == {names.LABEL_MANAGER_UID: "uid-1"}
    assert tear_down(kube, SETTINGS, keep_chief=True) == ["networkpolicy/demo-pods", "networkpolicy/demo-manager"]
    assert kube.network_policies == {}


def test_teardown_leaves_an_earlier_run_s_policy_of_the_same_name():
    kube = FakeKube(manager=manager_pod(name="demo", uid="uid-1"))
    manager_networkpolicy.isolate(kube, SETTINGS.replace(owner_uid="uid-0"))
    assert tear_down(kube, SETTINGS, keep_chief=True) == []
    assert set(kube.network_policies) == {"demo-pods", "demo-manager"}


def test_without_network_policies_nothing_is_created():
    kube = FakeKube(manager=manager_pod(name="demo", uid="uid-1"))
    manager_networkpolicy.isolate(kube, SETTINGS.replace(network_policy=False))
    assert kube.actions == []
