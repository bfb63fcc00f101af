"""Whether a node's GPU units are devices of their own, read as each platform labels its nodes.

A Horovod rank pins ``gpus[hvd.local_rank()]`` of the devices its process sees. In a
pod of several shared units that is one device, or several ranks on one device: ranks
fail or crawl. CUDA shows a process at most one MIG device, so in a pod of several MIG
slices every rank but the first fails there too. Such a node therefore takes one rank of
a job at most, unless the user allows more (``--allow-shared-gpus``); where the platform
itself refuses a container more than one unit, even then.

What each platform writes, and what is read here (the labels are quoted back to the user,
the platform's own words):

- **The NVIDIA device plugin and GPU Feature Discovery** (GFD; the GPU operator runs both).
  Sources: NVIDIA/k8s-device-plugin ``docs/gpu-feature-discovery/README.md`` ("Generated
  Labels", "MIG 'single' strategy", "MIG 'mixed' strategy"), its ``README.md`` ("Catalog of
  Labels", time-slicing and MPS), ``internal/lm/resource.go`` and ``mig-strategy.go`` with
  their tests; the GPU operator's ``gpu-operator-mig.rst`` and ``gpu-sharing.rst``
  (NVIDIA/cloud-native-docs), whose label dumps ``tests/unit/core/test_gpusharing.py`` reads.

  - ``nvidia.com/mig.strategy`` is written whenever the strategy is ``single`` or ``mixed``,
    MIG enabled or not, and the GPU operator's default ClusterPolicy has ``mig.strategy:
    single``: on its own it says nothing about the GPUs.
  - MIG under the single strategy: ``nvidia.com/gpu`` are MIG devices, and GFD says so on
    ``nvidia.com/gpu.product`` (``NVIDIA-H100-80GB-HBM3-MIG-1g.10gb``; ``...-MIG-INVALID``
    when the geometry does not suit the strategy) and with ``nvidia.com/gpu.slices.gi`` and
    ``.ci``, labels only MIG devices get.
  - MIG under the mixed strategy: each profile is a resource of its own
    (``nvidia.com/mig-1g.10gb``); ``nvidia.com/gpu`` on such a node are whole GPUs.
  - Time-slicing and MPS: ``<resource>.sharing-strategy`` (``time-slicing``, ``mps``,
    ``none``) and ``<resource>.replicas``; the product gets ``-SHARED``; with
    ``renameByDefault`` the resource is ``<resource>.shared`` (its labels keep the name).
  - The GPU operator's MIG manager: ``nvidia.com/mig.config`` is the geometry asked for
    (``all-disabled`` by default on MIG-capable nodes), ``nvidia.com/mig.config.state`` is
    ``pending`` or ``rebooting`` while it applies it, ``success`` or ``failed`` after.
    While it applies a MIG geometry GFD still labels the whole GPU (the operator's own
    example: ``gpu.product=NVIDIA-H100-80GB-HBM3`` beside ``mig.config=all-1g.10gb`` and
    ``mig.config.state=pending``), so that node is read as MIG already. GFD writes
    ``nvidia.com/mig.capable=false`` where no GPU can do MIG, and the MIG manager runs only
    where one can.

- **GKE** runs its own device plugin and no GFD. Sources: GKE's "Time-sharing GPUs",
  "NVIDIA MPS" and "Running multi-instance GPUs" pages; the label names as the cluster
  autoscaler's GKE provider declares them; GoogleCloudPlatform/container-engine-accelerators
  ``pkg/gpu/nvidia/gpusharing/gpusharing.go`` for what the plugin refuses.

  - ``cloud.google.com/gke-gpu-sharing-strategy`` (``time-sharing``, ``mps``) with
    ``cloud.google.com/gke-max-shared-clients-per-gpu``: each GPU is that many units of
    ``nvidia.com/gpu``. The plugin refuses a container more than one of them under
    time-sharing ("at most 1 nvidia.com/gpu can be requested on GPU nodes"), and under MPS
    on a node of more than one device.
  - ``cloud.google.com/gke-gpu-partition-size`` (``1g.5gb``): ``nvidia.com/gpu`` are MIG
    partitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

NVIDIA_GPU = "nvidia.com/gpu"
SHARED_SUFFIX = ".shared"  # the device plugin's renameByDefault: shared GPUs as nvidia.com/gpu.shared
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # the mixed strategy: one resource per MIG profile
MIG_PRODUCT_MARK = "-MIG-"  # on <resource>.product under the single strategy
SHARED_PRODUCT_SUFFIX = "-SHARED"
SHARING_STRATEGIES = {"time-slicing": "time-sliced GPUs", "mps": "GPUs shared by MPS"}
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_DISABLED_CONFIG = "all-disabled"
MIG_CONFIG_APPLYING = ("pending", "rebooting")

GKE_SHARING_LABEL = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_CLIENTS_LABEL = "cloud.google.com/gke-max-shared-clients-per-gpu"
GKE_PARTITION_LABEL = "cloud.google.com/gke-gpu-partition-size"
GKE_SHARING_STRATEGIES = {"time-sharing": "GPUs time-shared by GKE", "mps": "GPUs shared by GKE's MPS"}


@dataclass(frozen=True)
class SharedUnits:
    """Why a node's units of the job's GPU resource are not devices of their own."""

    why: str  # "MIG slices (nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb)": the labels that say so
    # The platform refuses a container more than one unit, --allow-shared-gpus or not.
    one_per_container: bool = False


def shared_units(labels: Mapping[str, str], resource: str, units: int = 0) -> SharedUnits | None:
    """How the ``units`` of ``resource`` a node with these labels advertises are shared, or
    None if each is a device of its own."""
    gke_why, one_per_container = _gke(labels, resource, units)
    reasons = [why for why in (_mig(labels, resource), _device_plugin_sharing(labels, resource), gke_why) if why]
    return SharedUnits(" and ".join(reasons), one_per_container) if reasons else None


def _said(labels: Mapping[str, str], *keys: str) -> str:
    """The labels as the node has them: "(key=value, ...)", those it has."""
    return "(" + ", ".join(f"{key}={labels[key]}" for key in keys if key in labels) + ")"


def _labels_of(resource: str) -> str:
    """The prefix of GFD's labels about ``resource`` (a renamed shared GPU keeps the GPU's)."""
    return resource.removesuffix(SHARED_SUFFIX)


def _mig(labels: Mapping[str, str], resource: str) -> str | None:
    if resource.startswith(MIG_RESOURCE_PREFIX):
        return f"MIG slices (resource {resource})"
    prefix = _labels_of(resource)
    if prefix != NVIDIA_GPU:
        return None
    product = f"{prefix}.product"
    if MIG_PRODUCT_MARK in labels.get(product, ""):
        return f"MIG slices {_said(labels, product)}"
    slice_label = f"{prefix}.slices."  # formatted once, not once a label: 5,000 nodes a survey
    slices = sorted(key for key in labels if key.startswith(slice_label))
    if slices:
        return f"MIG slices {_said(labels, *slices)}"
    if (labels.get(MIG_STRATEGY_LABEL) == "single" and labels.get(MIG_CAPABLE_LABEL) != "false"
            and labels.get(MIG_CONFIG_LABEL, MIG_DISABLED_CONFIG) != MIG_DISABLED_CONFIG
            and labels.get(MIG_CONFIG_STATE_LABEL) in MIG_CONFIG_APPLYING):
        return f"GPUs being made MIG slices {_said(labels, MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL)}"
    return None


def _device_plugin_sharing(labels: Mapping[str, str], resource: str) -> str | None:
    prefix = _labels_of(resource)
    strategy, replicas, product = (f"{prefix}.{name}" for name in ("sharing-strategy", "replicas", "product"))
    if labels.get(strategy) in SHARING_STRATEGIES:
        return f"{SHARING_STRATEGIES[labels[strategy]]} {_said(labels, strategy, replicas)}"
    # Older device plugins said it only by the replicas, the product's suffix or the name.
    if resource.endswith(SHARED_SUFFIX):
        return f"shared GPUs (resource {resource})"
    if labels.get(replicas, "").isdigit() and int(labels[replicas]) > 1:
        return f"shared GPUs {_said(labels, replicas)}"
    if labels.get(product, "").endswith(SHARED_PRODUCT_SUFFIX):
        return f"shared GPUs {_said(labels, product)}"
    return None


def _gke(labels: Mapping[str, str], resource: str, units: int) -> tuple[str | None, bool]:
    """GKE's partitions and sharing of nvidia.com/gpu, and whether its device plugin
    refuses a container more than one unit."""
    if resource != NVIDIA_GPU:
        return None, False
    reasons = []
    if labels.get(GKE_PARTITION_LABEL):
        reasons.append(f"GKE GPU partitions {_said(labels, GKE_PARTITION_LABEL)}")
    strategy = labels.get(GKE_SHARING_LABEL)
    if strategy not in GKE_SHARING_STRATEGIES:
        return " and ".join(reasons) or None, False
    reasons.append(f"{GKE_SHARING_STRATEGIES[strategy]} {_said(labels, GKE_SHARING_LABEL, GKE_CLIENTS_LABEL)}")
    clients = labels.get(GKE_CLIENTS_LABEL, "")
    devices = units // int(clients) if clients.isdigit() and int(clients) > 0 else units
    return " and ".join(reasons), strategy == "time-sharing" or devices > 1
