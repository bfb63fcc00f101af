"""Platform profiles of the local cluster's nodes: whole node specs, labels a kubelet can
register, and each profile read by the manager as its platform's documentation says."""

import pytest

from distributetrain.core.placement.gpusharing import SharedUnits, shared_units
from localcluster import profiles
from localcluster.__main__ import EXIT_BAD_INPUT, main
from localcluster.node.config import NodeSpec
from localcluster.nodeclaims import kubelet_labels

MIG_OFF = profiles.PROFILES["gpu-operator-mig-off"].node
EKS = profiles.PROFILES["eks-karpenter"].node


def test_a_gpu_stack_on_a_platform_s_nodes_is_one_node_spec_with_both_s_labels():
    specs = profiles.node_specs({"ip-10-0-1-7.ec2.internal": MIG_OFF.on(EKS)}, labels={"pool": "p1"})
    assert specs == [NodeSpec(
        name="ip-10-0-1-7.ec2.internal", index=0, gpus=8, gpu_resource="nvidia.com/gpu", hostname="ip-10-0-1-7",
        labels={**profiles.EKS_KARPENTER_P5, **profiles.OPERATOR_H100, "pool": "p1"},
        taints=("nvidia.com/gpu:NoSchedule",))]
    assert specs[0].labels["nvidia.com/mig.strategy"] == "single"  # the operator's, over the device plugin's chart
    assert specs[0].labels["karpenter.sh/capacity-type"] == "on-demand"


def test_a_mixed_strategy_node_advertises_a_resource_per_mig_profile_and_given_hostnames_win():
    mixed = profiles.node_profile("gpu-operator-mig-mixed")
    assert profiles.node_specs({"m": mixed}, hostnames={"m": "m-host"}) == [NodeSpec(
        name="m", index=0, gpus=16, gpu_resource="nvidia.com/mig-1g.10gb", hostname="m-host",
        labels=profiles.OPERATOR_H100_MIG_MIXED,
        more_resources={"nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8})]


@pytest.mark.parametrize("name", profiles.PROFILES)
def test_every_profile_s_labels_are_ones_a_kubelet_registers_its_node_with(name):
    labels = profiles.PROFILES[name].node.labels
    assert kubelet_labels(labels) == labels  # else the kubelet refuses to start


GKE_TIME_SHARING = SharedUnits("GPUs time-shared by GKE (cloud.google.com/gke-gpu-sharing-strategy=time-sharing, "
                               "cloud.google.com/gke-max-shared-clients-per-gpu=3)", one_per_container=True)
# What the manager makes of each profile's nodes, as docs/platforms.md says.
READINGS = {
    "gpu-operator-mig-off": None,
    "gpu-operator-mig-single": SharedUnits("MIG slices (nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb)"),
    "gpu-operator-mig-mixed": SharedUnits("MIG slices (resource nvidia.com/mig-1g.10gb)"),
    "gpu-operator-time-slicing": SharedUnits(
        "time-sliced GPUs (nvidia.com/gpu.sharing-strategy=time-slicing, nvidia.com/gpu.replicas=4)"),
    "gpu-operator-mps": SharedUnits("GPUs shared by MPS (nvidia.com/gpu.sharing-strategy=mps, nvidia.com/gpu.replicas=4)"),
    "gke": None,
    "gke-time-sharing": GKE_TIME_SHARING,
    "gke-partition": SharedUnits("GKE GPU partitions (cloud.google.com/gke-gpu-partition-size=1g.5gb)"),
    "eks-karpenter": None,
}


def test_each_profile_reads_as_its_platform_shares_its_gpus():
    assert {name: shared_units(profile.node.labels, profile.node.gpu_resource, profile.node.gpus)
            for name, profile in profiles.PROFILES.items()} == READINGS


def test_profiles_by_name_and_nodes_by_name_alone():
    assert profiles.node_profile("gpu-operator-mig-off + eks-karpenter") == MIG_OFF.on(EKS)
    assert profiles.parse_nodes("a, ip-1.ec2.internal/ip-1", MIG_OFF) == (
        {"a": MIG_OFF, "ip-1.ec2.internal": MIG_OFF}, {"ip-1.ec2.internal": "ip-1"})
    with pytest.raises(ValueError, match="no profile gpu-operator-mig-of; use NAME"):
        profiles.node_profile("gpu-operator-mig-of")
    with pytest.raises(ValueError, match="name the nodes only"):
        profiles.parse_nodes("a=8", MIG_OFF)


@pytest.mark.parametrize(("args", "says"), [
    (["--profile", "gke-shared"], "error: --profile: no profile gke-shared; use NAME[+NAME...]"),
    (["--profile", "gke"], "error: --profile: give the nodes it makes with --nodes"),
    (["--profile", "gke", "--nodes", "a=8"], "error: --nodes: with a profile, name the nodes only"),
])
def test_up_refuses_a_bad_profile_in_one_line_before_starting_anything(capsys, tmp_path, monkeypatch, args, says):
    monkeypatch.setenv("DT_RUN", str(tmp_path / "run"))
    assert main(["up", *args]) == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(says), error
    assert not (tmp_path / "run").exists()
