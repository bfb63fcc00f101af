"""Which nodes' GPU units share devices, read from node labels as each platform writes them.

The tables are real label dumps (the platform's own documentation, or its labeler's own
tests where no documented dump has the case), each with its source; only labels about
other things (CPU features, driver versions) are left out.
"""

from hypothesis import given
from hypothesis import strategies as st

from distributetrain.core.placement.gpusharing import SharedUnits, shared_units

GPU = "nvidia.com/gpu"

# NVIDIA/cloud-native-docs gpu-operator/manifests/output/mig-node-labels.json: an H100 node
# as the GPU operator leaves it by default, MIG off, strategy single.
OPERATOR_H100_MIG_OFF = {
    "kubernetes.io/hostname": "s4124-0073",
    "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.deploy.container-toolkit": "true",
    "nvidia.com/gpu.deploy.dcgm": "true",
    "nvidia.com/gpu.deploy.dcgm-exporter": "true",
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.deploy.driver": "true",
    "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
    "nvidia.com/gpu.deploy.mig-manager": "true",
    "nvidia.com/gpu.deploy.node-status-exporter": "true",
    "nvidia.com/gpu.deploy.nvsm": "",
    "nvidia.com/gpu.deploy.operator-validator": "true",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.machine": "PIO-4124GS-TNR-01-NC24B",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.config": "all-disabled",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/mps.capable": "false",
}
# gpu-operator-mig.rst, "Example: Single MIG Strategy": the node just labelled all-1g.10gb,
# the MIG manager at work, GFD's labels still the whole GPU's.
OPERATOR_H100_MIG_PENDING = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.config": "all-1g.10gb",
    "nvidia.com/mig.config.state": "pending",
    "nvidia.com/mig.strategy": "single",
}
# Ibid., once the MIG manager is done.
OPERATOR_H100_MIG_SINGLE = {
    "nvidia.com/gpu.count": "7",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
    "nvidia.com/gpu.slices.ci": "1",
    "nvidia.com/gpu.slices.gi": "1",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.config": "all-1g.10gb",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/mig.strategy": "single",
}
# Ibid., "Example: Reconfiguring MIG Profiles".
OPERATOR_H100_MIG_3G = {
    "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/gpu.slices.ci": "3",
    "nvidia.com/gpu.slices.gi": "3",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.config": "all-3g.40gb",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/mps.capable": "false",
}
# gpu-operator/manifests/output/mig-mixed-node-labels.json: all-balanced, mixed strategy.
OPERATOR_H100_MIG_MIXED = {
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.replicas": "0",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig-1g.10gb.count": "2",
    "nvidia.com/mig-1g.10gb.engines.copy": "1",
    "nvidia.com/mig-1g.10gb.engines.decoder": "1",
    "nvidia.com/mig-1g.10gb.engines.encoder": "0",
    "nvidia.com/mig-1g.10gb.engines.jpeg": "1",
    "nvidia.com/mig-1g.10gb.engines.ofa": "0",
    "nvidia.com/mig-1g.10gb.memory": "9984",
    "nvidia.com/mig-1g.10gb.multiprocessors": "16",
    "nvidia.com/mig-1g.10gb.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
    "nvidia.com/mig-1g.10gb.replicas": "1",
    "nvidia.com/mig-1g.10gb.sharing-strategy": "none",
    "nvidia.com/mig-1g.10gb.slices.ci": "1",
    "nvidia.com/mig-1g.10gb.slices.gi": "1",
    "nvidia.com/mig-2g.20gb.count": "1",
    "nvidia.com/mig-2g.20gb.product": "NVIDIA-H100-80GB-HBM3-MIG-2g.20gb",
    "nvidia.com/mig-2g.20gb.replicas": "1",
    "nvidia.com/mig-2g.20gb.sharing-strategy": "none",
    "nvidia.com/mig-2g.20gb.slices.ci": "2",
    "nvidia.com/mig-2g.20gb.slices.gi": "2",
    "nvidia.com/mig-3g.40gb.count": "1",
    "nvidia.com/mig-3g.40gb.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
    "nvidia.com/mig-3g.40gb.replicas": "1",
    "nvidia.com/mig-3g.40gb.sharing-strategy": "none",
    "nvidia.com/mig-3g.40gb.slices.ci": "3",
    "nvidia.com/mig-3g.40gb.slices.gi": "3",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.config": "all-balanced",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mps.capable": "false",
}
# NVIDIA/gpu-operator#479: a geometry the single strategy cannot use (GFD's
# newInvalidMigStrategyLabeler writes count, replicas and memory 0, no sharing strategy).
OPERATOR_A100_MIG_INVALID = {
    "nvidia.com/gpu.count": "0",
    "nvidia.com/gpu.memory": "0",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-INVALID",
    "nvidia.com/gpu.replicas": "0",
    "nvidia.com/gpu.sharing-strategy": "",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.config": "all-balanced",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/mig.strategy": "single",
}
# The GPU operator's defaults on a T4 node (no MIG): GFD's labels as the issue report and
# the GFD e2e test expect them (NVIDIA/k8s-device-plugin#503), mig.strategy from the
# default ClusterPolicy.
OPERATOR_T4 = {
    "nvidia.com/gpu.count": "4",
    "nvidia.com/gpu.family": "turing",
    "nvidia.com/gpu.memory": "15360",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "Tesla-T4",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "false",
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/mps.capable": "false",
}
# gpu-operator/gpu-sharing.rst, "Verifying the GPU Time-Slicing Configuration", without and
# with renameByDefault (then nvidia.com/gpu advertises 0 and nvidia.com/gpu.shared 16).
OPERATOR_T4_TIME_SLICED = {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.product": "Tesla-T4-SHARED",
                           "nvidia.com/gpu.replicas": "4"}
OPERATOR_T4_TIME_SLICED_RENAMED = {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.product": "Tesla-T4",
                                   "nvidia.com/gpu.replicas": "4"}
# GFD since v0.15 (NVIDIA/k8s-device-plugin#503; internal/lm/mig-strategy_test.go, "sharing
# is applied to multiple devices"): the strategy is said.
GFD_TIME_SLICED = {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.product": "Tesla-T4-SHARED",
                   "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing",
                   "nvidia.com/mig.capable": "false", "nvidia.com/mig.strategy": "single"}
# GFD with sharing.mps (README "With CUDA MPS"; resource.go writes the strategy and -SHARED,
# nvml.go mps.capable), on #503's 8-V100 node.
GFD_MPS = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB-N-SHARED",
           "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "mps",
           "nvidia.com/mig.capable": "false", "nvidia.com/mps.capable": "true"}
# gpu-sharing.rst: time-slicing under MIG single puts both marks on the product.
OPERATOR_MIG_TIME_SLICED = {"nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb-SHARED",
                            "nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.sharing-strategy": "time-slicing",
                            "nvidia.com/mig.strategy": "single"}
# EKS with Karpenter (karpenter-provider-aws docs/reference/instance-types.md, p4d.24xlarge)
# and the device plugin's chart with GFD (aws-samples/karpenter-blueprints nvidia-gpu-workload:
# the chart's migStrategy none writes no mig.strategy).
EKS_KARPENTER_P4D = {
    "karpenter.k8s.aws/instance-gpu-count": "8",
    "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
    "karpenter.k8s.aws/instance-gpu-name": "a100",
    "karpenter.sh/capacity-type": "on-demand",
    "node.kubernetes.io/instance-type": "p4d.24xlarge",
    "topology.kubernetes.io/zone": "us-east-1a",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "true",
}
# GKE ("Time-sharing GPUs on GKE": "the node labels would look similar to the following";
# "Running multi-instance GPUs": the partition size label; the accelerator on every GPU node).
GKE_T4 = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4", "cloud.google.com/gke-gpu-driver-version": "default",
          "cloud.google.com/gke-nodepool": "gpu-pool"}
GKE_TIME_SHARED = {**GKE_T4, "cloud.google.com/gke-max-shared-clients-per-gpu": "3",
                   "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing"}
GKE_MPS = {**GKE_T4, "cloud.google.com/gke-max-shared-clients-per-gpu": "4",
           "cloud.google.com/gke-gpu-sharing-strategy": "mps"}
GKE_PARTITIONED = {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
                   "cloud.google.com/gke-gpu-partition-size": "1g.5gb"}

OPERATOR_MIG_1G = "MIG slices (nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb)"
GKE_TIME_SHARING = ("GPUs time-shared by GKE (cloud.google.com/gke-gpu-sharing-strategy=time-sharing, "
                    "cloud.google.com/gke-max-shared-clients-per-gpu=3)")
GKE_MPS_SHARING = ("GPUs shared by GKE's MPS (cloud.google.com/gke-gpu-sharing-strategy=mps, "
                   "cloud.google.com/gke-max-shared-clients-per-gpu=4)")

# (labels, resource, units the node advertises): how they are shared.
READINGS = [
    ((OPERATOR_H100_MIG_OFF, GPU, 8), None),
    ((OPERATOR_T4, GPU, 4), None),
    ((EKS_KARPENTER_P4D, GPU, 8), None),
    ((GKE_T4, GPU, 2), None),
    ((OPERATOR_H100_MIG_MIXED, GPU, 0), None),  # mixed: nvidia.com/gpu are the GPUs MIG leaves whole
    ((OPERATOR_H100_MIG_PENDING, GPU, 8), SharedUnits(
        "GPUs being made MIG slices (nvidia.com/mig.config=all-1g.10gb, nvidia.com/mig.config.state=pending)")),
    ((OPERATOR_H100_MIG_SINGLE, GPU, 7), SharedUnits(OPERATOR_MIG_1G)),
    ((OPERATOR_H100_MIG_3G, GPU, 2), SharedUnits("MIG slices (nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-3g.40gb)")),
    ((OPERATOR_A100_MIG_INVALID, GPU, 0), SharedUnits(
        "MIG slices (nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-MIG-INVALID)")),
    ((OPERATOR_H100_MIG_MIXED, "nvidia.com/mig-1g.10gb", 2), SharedUnits("MIG slices (resource nvidia.com/mig-1g.10gb)")),
    ((OPERATOR_T4_TIME_SLICED, GPU, 16), SharedUnits("shared GPUs (nvidia.com/gpu.replicas=4)")),
    ((OPERATOR_T4_TIME_SLICED_RENAMED, "nvidia.com/gpu.shared", 16), SharedUnits(
        "shared GPUs (resource nvidia.com/gpu.shared)")),
    ((GFD_TIME_SLICED, GPU, 8), SharedUnits(
        "time-sliced GPUs (nvidia.com/gpu.sharing-strategy=time-slicing, nvidia.com/gpu.replicas=4)")),
    ((GFD_MPS, GPU, 32), SharedUnits("GPUs shared by MPS (nvidia.com/gpu.sharing-strategy=mps, nvidia.com/gpu.replicas=4)")),
    ((OPERATOR_MIG_TIME_SLICED, GPU, 14), SharedUnits(
        "MIG slices (nvidia.com/gpu.product=A100-SXM4-40GB-MIG-1g.5gb-SHARED) and time-sliced GPUs "
        "(nvidia.com/gpu.sharing-strategy=time-slicing, nvidia.com/gpu.replicas=2)")),
    ((GKE_TIME_SHARED, GPU, 6), SharedUnits(GKE_TIME_SHARING, one_per_container=True)),
    ((GKE_MPS, GPU, 4), SharedUnits(GKE_MPS_SHARING)),  # one GPU: GKE lets a container have several clients
    ((GKE_MPS, GPU, 8), SharedUnits(GKE_MPS_SHARING, one_per_container=True)),
    ((GKE_PARTITIONED, GPU, 7), SharedUnits("GKE GPU partitions (cloud.google.com/gke-gpu-partition-size=1g.5gb)")),
    ((GKE_PARTITIONED, "amd.com/gpu", 7), None),  # GKE's labels are about its nvidia.com/gpu
]


def test_each_platforms_labels_read_as_it_shares_its_gpus():
    assert [shared_units(*node) for node, _ in READINGS] == [reading for _, reading in READINGS]


# Labels that say nothing of MIG being on: any MIG strategy, capability and MIG manager
# state, with the MIG geometry asked for all-disabled (or none asked).
MIG_OFF_LABELS = st.fixed_dictionaries({}, optional={
    "nvidia.com/mig.strategy": st.sampled_from(["none", "single", "mixed"]),
    "nvidia.com/mig.capable": st.sampled_from(["true", "false"]),
    "nvidia.com/mig.config": st.just("all-disabled"),
    "nvidia.com/mig.config.state": st.sampled_from(["pending", "rebooting", "success", "failed"]),
    "nvidia.com/gpu.product": st.sampled_from(["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB", "Tesla-T4"]),
    "nvidia.com/gpu.count": st.sampled_from(["1", "4", "8"]),
    "nvidia.com/gpu.replicas": st.sampled_from(["0", "1"]),
    "nvidia.com/gpu.sharing-strategy": st.sampled_from(["none", ""]),
    "nvidia.com/mps.capable": st.just("false"),
    "cloud.google.com/gke-accelerator": st.just("nvidia-tesla-a100"),
})


@given(MIG_OFF_LABELS, st.integers(0, 64))
def test_a_node_with_mig_off_reads_as_whole_gpus_under_any_mig_strategy(labels, units):
    assert shared_units(labels, GPU, units) is None


@given(MIG_OFF_LABELS, st.sampled_from(["pending", "rebooting"]))
def test_a_node_whose_gpus_cannot_do_mig_never_reads_as_mig(labels, state):
    asked = {**labels, "nvidia.com/mig.capable": "false", "nvidia.com/mig.config": "all-1g.10gb",
             "nvidia.com/mig.config.state": state}
    assert shared_units(asked, GPU) is None


@given(MIG_OFF_LABELS, st.sampled_from(["1g.10gb", "3g.40gb", "INVALID"]), st.booleans())
def test_gfd_saying_mig_devices_reads_as_mig_whatever_else_the_node_says(labels, profile, shared):
    product = f"NVIDIA-H100-80GB-HBM3-MIG-{profile}" + ("-SHARED" if shared else "")
    reading = shared_units({**labels, "nvidia.com/gpu.product": product}, GPU)
    assert reading is not None and reading.why.startswith(f"MIG slices (nvidia.com/gpu.product={product})")


@given(MIG_OFF_LABELS, st.integers(2, 48), st.integers(0, 64))
def test_gke_time_sharing_gives_a_container_one_unit_whatever_else_the_node_says(labels, clients, units):
    shared = {**labels, "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
              "cloud.google.com/gke-max-shared-clients-per-gpu": str(clients)}
    assert shared_units(shared, GPU, units).one_per_container
