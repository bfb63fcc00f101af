"""Nodes as each platform sets them up by default: one place for their labels, taints and GPUs.

A job planned on the local cluster's plain nodes proves nothing about the nodes users run,
whose labels say what their GPUs are (and are sometimes misread: the GPU operator labels
`nvidia.com/mig.strategy=single` on every GPU node, MIG on or not). A profile makes a local
node look as the platform's own does: its labels, taints and extended resources, taken from
the platform's documentation and real label dumps (each profile names its sources). Only
the GPUs stay simulated; what the manager reads is the platform's.

`node_specs` gives nodes their profiles (one each, possibly different), for
`Cluster.add_node_specs` to start; `python -m localcluster up --profile NAME --nodes a,b`
does the same from the shell.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from localcluster.node.config import NodeSpec
from localcluster.nodegroups import parse_node_spec

NVIDIA_GPU = "nvidia.com/gpu"
# The taints GPU nodes carry: GKE's on every GPU node pool of a cluster that has other
# pools ("Run GPUs in GKE Standard node pools"); a Karpenter GPU NodePool's, as AWS's
# Karpenter blueprint for NVIDIA GPUs writes it (aws-samples/karpenter-blueprints).
GKE_GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"
KARPENTER_GPU_TAINT = "nvidia.com/gpu:NoSchedule"


@dataclass(frozen=True)
class NodeProfile:
    """What a platform's GPU node shows the API: labels, taints and extended resources."""

    labels: Mapping[str, str]
    gpus: int  # how many units of gpu_resource the node advertises
    gpu_resource: str = NVIDIA_GPU
    more_resources: Mapping[str, int] = field(default_factory=dict)  # as NodeSpec.more_resources
    taints: tuple[str, ...] = ()
    # The kubernetes.io/hostname label is the node name's first DNS label (EKS-style names:
    # Node ip-10-0-1-7.ec2.internal, hostname ip-10-0-1-7), not the whole name.
    short_hostname: bool = False

    def on(self, platform: NodeProfile) -> NodeProfile:
        """This GPU stack on `platform`'s nodes: its labels over the platform's, both's taints,
        this one's GPUs (the GPU operator on EKS nodes Karpenter launched)."""
        return dataclasses.replace(self, labels={**platform.labels, **self.labels},
                                   taints=tuple(dict.fromkeys((*platform.taints, *self.taints))),
                                   short_hostname=self.short_hostname or platform.short_hostname)

    def hostname(self, node_name: str) -> str:
        return node_name.split(".")[0] if self.short_hostname else node_name


@dataclass(frozen=True)
class Profile:
    """A platform's default set-up, and where it is documented."""

    name: str
    sources: tuple[str, ...]
    node: NodeProfile


# NVIDIA/cloud-native-docs gpu-operator/manifests/output/mig-node-labels.json (GFD's and the
# operator's labels of an H100 node with the operator's defaults), on an 8-GPU node.
OPERATOR_H100 = {
    "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.deploy.container-toolkit": "true",
    "nvidia.com/gpu.deploy.dcgm": "true",
    "nvidia.com/gpu.deploy.dcgm-exporter": "true",
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.deploy.driver": "true",
    "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
    "nvidia.com/gpu.deploy.mig-manager": "true",
    "nvidia.com/gpu.deploy.node-status-exporter": "true",
    "nvidia.com/gpu.deploy.operator-validator": "true",
    "nvidia.com/gpu.family": "hopper",
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
# gpu-operator-mig.rst, "Example: Single MIG Strategy": all-1g.10gb applied, 7 MIG devices a GPU.
OPERATOR_H100_MIG_SINGLE = {
    **{key: value for key, value in OPERATOR_H100.items() if not key.startswith("nvidia.com/gpu.compute.")},
    "nvidia.com/gpu.count": "56",
    "nvidia.com/gpu.memory": "9984",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
    "nvidia.com/gpu.slices.ci": "1",
    "nvidia.com/gpu.slices.gi": "1",
    "nvidia.com/mig.config": "all-1g.10gb",
}
# gpu-operator/manifests/output/mig-mixed-node-labels.json: all-balanced under the mixed
# strategy (per GPU two 1g.10gb, one 2g.20gb, one 3g.40gb), on 8 GPUs.
MIXED_PROFILES = {"1g.10gb": (2, "9984", "1"), "2g.20gb": (1, "20096", "2"), "3g.40gb": (1, "40320", "3")}


def _mig_profile_labels(profile: str, per_gpu: int, memory: str, slices: str) -> dict[str, str]:
    """GFD's labels of one MIG profile of the mixed strategy, on an 8-GPU node."""
    prefix = f"nvidia.com/mig-{profile}"
    return {f"{prefix}.count": str(8 * per_gpu), f"{prefix}.memory": memory,
            f"{prefix}.product": f"NVIDIA-H100-80GB-HBM3-MIG-{profile}", f"{prefix}.replicas": "1",
            f"{prefix}.sharing-strategy": "none", f"{prefix}.slices.ci": slices, f"{prefix}.slices.gi": slices}


OPERATOR_H100_MIG_MIXED = {
    **OPERATOR_H100,
    "nvidia.com/gpu.replicas": "0",
    "nvidia.com/mig.config": "all-balanced",
    "nvidia.com/mig.strategy": "mixed",
    **{key: value for profile, shape in MIXED_PROFILES.items()
       for key, value in _mig_profile_labels(profile, *shape).items()},
}
# gpu-sharing.rst, "Verifying the GPU Time-Slicing Configuration" (a 4-T4 node, 4 replicas, the
# node labelled with the docs' config name), with the sharing strategy GFD writes since v0.15
# and the operator's default MIG labels of a GPU that cannot do MIG.
OPERATOR_T4 = {
    "nvidia.com/gpu.count": "4",
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
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
OPERATOR_T4_TIME_SLICED = {**OPERATOR_T4, "nvidia.com/device-plugin.config": "tesla-t4",
                           "nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "4",
                           "nvidia.com/gpu.sharing-strategy": "time-slicing"}
# k8s-device-plugin README "With CUDA MPS" and internal/lm (resource.go: strategy, replicas and
# -SHARED; nvml.go: mps.capable).
OPERATOR_T4_MPS = {**OPERATOR_T4, "nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "4",
                   "nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/mps.capable": "true"}

# GKE: the labels its GPU node pools get ("About GPUs in GKE", "Time-sharing GPUs on GKE",
# "Running multi-instance GPUs"; the names as the cluster autoscaler's GKE provider declares
# them). GKE runs its own device plugin and no GPU Feature Discovery.
GKE_NODE = {"cloud.google.com/gke-boot-disk": "pd-balanced", "cloud.google.com/gke-container-runtime": "containerd",
            "cloud.google.com/gke-gpu-driver-version": "default", "cloud.google.com/gke-os-distribution": "cos",
            "cloud.google.com/gke-provisioning": "standard", "topology.kubernetes.io/region": "us-central1",
            "topology.kubernetes.io/zone": "us-central1-a", "topology.gke.io/zone": "us-central1-a"}
GKE_A100 = {**GKE_NODE, "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
            "cloud.google.com/gke-nodepool": "a100", "cloud.google.com/machine-family": "a2",
            "node.kubernetes.io/instance-type": "a2-highgpu-8g"}
GKE_T4_TIME_SHARED = {**GKE_NODE, "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                      "cloud.google.com/gke-nodepool": "t4-shared", "cloud.google.com/machine-family": "n1",
                      "node.kubernetes.io/instance-type": "n1-standard-16",
                      "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
                      "cloud.google.com/gke-max-shared-clients-per-gpu": "3"}
GKE_A100_PARTITIONED = {**GKE_A100, "cloud.google.com/gke-nodepool": "a100-1g",
                        "cloud.google.com/gke-gpu-partition-size": "1g.5gb",
                        "node.kubernetes.io/instance-type": "a2-highgpu-1g"}

# EKS, a node Karpenter launched: karpenter-provider-aws's instance-types reference (the
# p5.48xlarge labels), Karpenter's own (nodepool, capacity type, node class), EKS's zone and
# zone ID; the device plugin's chart with GPU Feature Discovery, as AWS's Karpenter blueprint
# installs it (its migStrategy none writes no MIG strategy).
EKS_KARPENTER_P5 = {
    "intent": "gpu",
    "karpenter.k8s.aws/ec2nodeclass": "gpu",
    "karpenter.k8s.aws/instance-category": "p",
    "karpenter.k8s.aws/instance-cpu": "192",
    "karpenter.k8s.aws/instance-family": "p5",
    "karpenter.k8s.aws/instance-generation": "5",
    "karpenter.k8s.aws/instance-gpu-count": "8",
    "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
    "karpenter.k8s.aws/instance-gpu-memory": "81920",
    "karpenter.k8s.aws/instance-gpu-name": "h100",
    "karpenter.k8s.aws/instance-size": "48xlarge",
    "karpenter.sh/capacity-type": "on-demand",
    "karpenter.sh/initialized": "true",
    "karpenter.sh/nodepool": "gpu",
    "karpenter.sh/registered": "true",
    "node.kubernetes.io/instance-type": "p5.48xlarge",
    "topology.k8s.aws/zone-id": "use1-az4",
    "topology.kubernetes.io/region": "us-east-1",
    "topology.kubernetes.io/zone": "us-east-1a",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mps.capable": "false",
}

GPU_OPERATOR_DOCS = "NVIDIA/cloud-native-docs gpu-operator/gpu-operator-mig.rst, gpu-sharing.rst, manifests/output/"
GFD_DOCS = "NVIDIA/k8s-device-plugin README.md, docs/gpu-feature-discovery/README.md, internal/lm/"
GKE_DOCS = "cloud.google.com/kubernetes-engine/docs: gpus, timesharing-gpus, gpus-multi"
KARPENTER_DOCS = ("aws/karpenter-provider-aws website/content/en/docs/reference/instance-types.md",
                  "aws-samples/karpenter-blueprints blueprints/nvidia-gpu-workload")

PROFILES: dict[str, Profile] = {profile.name: profile for profile in (
    Profile("gpu-operator-mig-off", (GPU_OPERATOR_DOCS, GFD_DOCS), NodeProfile(OPERATOR_H100, 8)),
    Profile("gpu-operator-mig-single", (GPU_OPERATOR_DOCS, GFD_DOCS), NodeProfile(OPERATOR_H100_MIG_SINGLE, 56)),
    Profile("gpu-operator-mig-mixed", (GPU_OPERATOR_DOCS, GFD_DOCS), NodeProfile(
        OPERATOR_H100_MIG_MIXED, 16, "nvidia.com/mig-1g.10gb",
        more_resources={"nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8})),
    Profile("gpu-operator-time-slicing", (GPU_OPERATOR_DOCS, GFD_DOCS), NodeProfile(OPERATOR_T4_TIME_SLICED, 16)),
    Profile("gpu-operator-mps", (GPU_OPERATOR_DOCS, GFD_DOCS), NodeProfile(OPERATOR_T4_MPS, 16)),
    Profile("gke", (GKE_DOCS,), NodeProfile(GKE_A100, 8, taints=(GKE_GPU_TAINT,))),
    Profile("gke-time-sharing", (GKE_DOCS,), NodeProfile(GKE_T4_TIME_SHARED, 6, taints=(GKE_GPU_TAINT,))),
    Profile("gke-partition", (GKE_DOCS,), NodeProfile(GKE_A100_PARTITIONED, 7, taints=(GKE_GPU_TAINT,))),
    Profile("eks-karpenter", (*KARPENTER_DOCS, GFD_DOCS), NodeProfile(
        EKS_KARPENTER_P5, 8, taints=(KARPENTER_GPU_TAINT,), short_hostname=True)),
    # An OpenShift-like namespace (a UID range of its own, other UIDs refused) is a profile
    # too, of namespaces rather than nodes.
)}
PROFILE_FORMAT = "NAME[+NAME...], e.g. gpu-operator-mig-off+eks-karpenter (a GPU stack on a platform's nodes)"


def node_profile(text: str) -> NodeProfile:
    """"gpu-operator-mig-off+eks-karpenter": the first profile's GPUs on the nodes of the
    others (``NodeProfile.on``)."""
    names = [name.strip() for name in text.split("+")]
    unknown = [name for name in names if name not in PROFILES]
    if unknown or not names:
        raise ValueError(f"no profile {', '.join(unknown) or repr(text)}; use {PROFILE_FORMAT} "
                         f"with profiles {', '.join(PROFILES)}")
    profile = PROFILES[names[0]].node
    for platform in names[1:]:
        profile = profile.on(PROFILES[platform].node)
    return profile


def parse_nodes(text: str, profile: NodeProfile) -> tuple[dict[str, NodeProfile], dict[str, str]]:
    """"a,ip-10-0-1-7.ec2.internal/ip-10-0-1-7": the nodes, each of `profile`, and the
    hostname labels given for them; their GPUs are the profile's to say."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if any("=" in item for item in items):
        raise ValueError(f"with a profile, name the nodes only: NAME[/HOSTNAME][,...] (its nodes have "
                         f"{profile.gpus} {profile.gpu_resource} each)")
    gpus, hostnames = parse_node_spec(",".join(f"{item}={profile.gpus}" for item in items))
    return {name: profile for name in gpus}, hostnames


def node_specs(nodes: Mapping[str, NodeProfile], labels: Mapping[str, str] = {},
               hostnames: Mapping[str, str] = {}) -> list[NodeSpec]:
    """A NodeSpec for each node name, as its profile says (index 0: the group assigns it);
    `labels` on each besides the profile's, `hostnames` instead of the profile's."""
    return [NodeSpec(name=name, index=0, gpus=profile.gpus, gpu_resource=profile.gpu_resource,
                     hostname=hostnames.get(name, profile.hostname(name)), labels={**profile.labels, **labels},
                     taints=profile.taints, more_resources=dict(profile.more_resources))
            for name, profile in nodes.items()]
