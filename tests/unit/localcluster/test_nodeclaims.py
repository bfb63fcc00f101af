"""The local cloud behind Karpenter (localcluster/localcluster/nodeclaims.py, karpenter.py): what a
NodeClaim's node is given, and the instances' records and booter, without a cluster."""

from __future__ import annotations

import json

import pytest

from localcluster import karpenter, nodeclaims
from localcluster.layout import RunLayout
from localcluster.nodeclaims import HostCapacity, Instance, InstanceError
from localcluster.nodegroups import NodeGroupRegistry

GIB = 2**30
MIB = 2**20
HOST = HostCapacity(cpu_millis=2000, memory_bytes=24 * GIB)
LAUNCH = {
    "name": "gpu-abcde",
    "providerID": "localcluster://gpu-abcde",
    "instanceType": "gpu-8x",
    "labels": {"karpenter.sh/nodepool": "gpu", "node.kubernetes.io/instance-type": "gpu-8x",
               "topology.kubernetes.io/zone": "zone-a", "kubernetes.io/hostname": "gpu-abcde",
               "karpenter.kwok.sh/instance-cpu": "2", "node-restriction.kubernetes.io/team": "a",
               "example.kubernetes.io/other": "x"},
    "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
               {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    "capacity": {"cpu": "2", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "8"},
    "allocatable": {"cpu": "1900m", "memory": "16374Mi", "pods": "110", "nvidia.com/gpu": "8"},
    "kubeReserved": {"cpu": "100m", "memory": "10Mi"},
    "bootDelaySeconds": 3,
}


def test_the_kubelet_reserves_the_host_beyond_the_instance_so_allocatable_is_the_instance_type_s():
    reservations = nodeclaims.kubelet_reservations(LAUNCH["capacity"], LAUNCH["kubeReserved"], {}, {}, HOST)
    assert reservations == {"kubeReserved": {"cpu": "100m", "memory": str(10 * MIB)},
                            "systemReserved": {"cpu": "0m", "memory": str(8 * GIB - 100 * MIB)}}
    # The kubelet: allocatable = capacity (the host's) - kube - system - hard eviction (100Mi).
    allocatable = HOST.memory_bytes - 10 * MIB - (8 * GIB - 100 * MIB) - 100 * MIB
    assert allocatable == 16 * GIB - 10 * MIB


def test_an_instance_bigger_than_the_host_is_refused():
    with pytest.raises(InstanceError, match="does not fit this host"):
        nodeclaims.kubelet_reservations({"cpu": "4", "memory": "8Gi"}, {}, {}, {}, HOST)
    with pytest.raises(InstanceError, match="does not fit this host"):
        nodeclaims.kubelet_reservations({"cpu": "1", "memory": "24Gi"}, {}, {}, {}, HOST)


def test_the_node_registers_with_the_claim_s_provider_id_taints_gpus_and_the_labels_a_kubelet_may_set():
    spec = Instance(LAUNCH).node_spec("nvidia.com/gpu", HOST)
    assert (spec.name, spec.hostname, spec.provider_id, spec.gpus, spec.gpu_resource, spec.max_pods) == (
        "gpu-abcde", "gpu-abcde", "localcluster://gpu-abcde", 8, "nvidia.com/gpu", 110)
    assert spec.taints == ("karpenter.sh/unregistered:NoExecute", "nvidia.com/gpu=present:NoSchedule")
    # Karpenter syncs the others onto the Node at registration.
    assert spec.labels == {key: value for key, value in LAUNCH["labels"].items()
                           if key not in ("node-restriction.kubernetes.io/team", "example.kubernetes.io/other")}


def test_a_node_advertises_one_extended_resource():
    assert nodeclaims.gpu_capacity({"cpu": "1"}, "nvidia.com/gpu") == ("nvidia.com/gpu", 0)
    with pytest.raises(InstanceError, match="one extended resource"):
        nodeclaims.gpu_capacity({"nvidia.com/gpu": "1", "amd.com/gpu": "1"}, "nvidia.com/gpu")


def test_a_launch_without_its_provider_id_is_refused():
    with pytest.raises(InstanceError, match="providerID"):
        nodeclaims.validate_launch({**LAUNCH, "providerID": ""})


def test_a_launch_records_the_instance_reserves_its_index_and_starts_its_booter_once(tmp_path, monkeypatch):
    layout = RunLayout(tmp_path)
    layout.make_dirs()
    monkeypatch.setattr(HostCapacity, "of_this_host", classmethod(lambda cls: HOST))
    started = []
    monkeypatch.setattr(nodeclaims.processes, "start_detached", lambda argv, *args, **kwargs: started.append(argv))
    instances = nodeclaims.Instances(layout)
    launched = instances.launch(LAUNCH, "/venv/bin/python")
    assert instances.launch(LAUNCH, "/venv/bin/python") == launched
    assert started == [["/venv/bin/python", "-m", "localcluster", "nodeclaim", "boot", "gpu-abcde"]]
    assert [instance.document for instance in instances.list()] == [launched.document]
    assert {key: launched.document[key] for key in LAUNCH} == LAUNCH and launched.document["launchedAt"].endswith("Z")
    assert json.loads(layout.node_groups_file.read_text())[0]["names"] == ["gpu-abcde"]
    instances.forget("gpu-abcde")
    assert instances.list() == []


def test_default_instance_types_fit_a_two_cpu_host_and_boot_after_the_delay():
    types = karpenter.instance_types(boot_delay_s=5)
    karpenter.validate_instance_types(types, HOST)
    assert {t["name"]: (t["resources"]["nvidia.com/gpu"], t["bootDelay"]) for t in types} == {
        "gpu-8x": ("8", "5s"), "gpu-4x": ("4", "5s"), "gpu-1x": ("1", "5s")}
    with pytest.raises(InstanceError, match="gpu-8x"):
        karpenter.validate_instance_types(types, HostCapacity(cpu_millis=2000, memory_bytes=8 * GIB))


def test_karpenter_runs_outside_the_cluster_without_leader_election_and_with_the_local_provider(tmp_path):
    env = karpenter.environment(tmp_path / "kubeconfig", tmp_path / "types.json", "/venv/bin/python", "/repo",
                                {"PATH": "/usr/bin"})
    assert env == {"PATH": "/usr/bin", "KUBECONFIG": f"{tmp_path}/kubeconfig", "DISABLE_LEADER_ELECTION": "true",
                   "SYSTEM_NAMESPACE": "karpenter", "METRICS_PORT": "18090", "HEALTH_PROBE_PORT": "18091",
                   "INSTANCE_TYPES_FILE_PATH": f"{tmp_path}/types.json", "FEATURE_GATES": "NodeRepair=true",
                   "LOCALCLUSTER_PYTHON": "/venv/bin/python", "PYTHONPATH": "/repo"}
    assert karpenter.environment(tmp_path, tmp_path, "python", "/repo", {}, repair_toleration_s=20)[
        "LOCALCLUSTER_REPAIR_TOLERATION"] == "20s"


def test_an_instance_whose_node_group_is_gone_is_forgotten(tmp_path, monkeypatch):
    layout = RunLayout(tmp_path)
    layout.make_dirs()
    monkeypatch.setattr(HostCapacity, "of_this_host", classmethod(lambda cls: HOST))
    monkeypatch.setattr(nodeclaims.processes, "start_detached", lambda *args, **kwargs: None)
    instances = nodeclaims.Instances(layout)
    instances.launch(LAUNCH, "/venv/bin/python")
    NodeGroupRegistry(layout).clear()  # a `down` that knew nothing of Karpenter
    assert instances.list() == [] and instances.get(LAUNCH["name"]) is None
