"""Whether a node's GPU units are devices of their own, read from GPU Feature Discovery.

The NVIDIA device plugin can advertise one GPU as several units: time-slicing and MPS
give each GPU ``replicas`` units (a node with 2 GPUs and 4 replicas allocates 8), and a
MIG slice is a unit of its own. GPU Feature Discovery (GFD) labels the node so:
``nvidia.com/gpu.sharing-strategy`` (``time-slicing``, ``mps`` or ``none``),
``nvidia.com/gpu.replicas``, ``nvidia.com/gpu.count`` (the physical GPUs), a ``-SHARED``
suffix on ``nvidia.com/gpu.product``, and ``nvidia.com/mig.strategy``; MIG profiles
(``nvidia.com/mig-1g.10gb``) carry the same labels under their own name.

A Horovod rank pins ``gpus[hvd.local_rank()]`` of the devices its process sees. In a
pod of several shared units that is one device, or several ranks on one device: ranks
fail or crawl. CUDA shows a process at most one MIG device, so in a pod of several MIG
slices every rank but the first fails there too. Such a node therefore takes one rank of
a job at most, unless the user allows more (``--allow-shared-gpus``).
"""

from __future__ import annotations

from collections.abc import Mapping

NVIDIA_GPU = "nvidia.com/gpu"
SHARED_SUFFIX = ".shared"  # the device plugin's renameByDefault: shared GPUs as nvidia.com/gpu.shared
SHARING_STRATEGIES = ("time-slicing", "mps")
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # the mixed strategy: one resource per MIG profile
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"


def _labels_of(resource: str) -> str:
    """The prefix of GFD's labels about ``resource`` (a renamed shared GPU keeps the GPU's)."""
    return resource.removesuffix(SHARED_SUFFIX)


def shared_units(labels: Mapping[str, str], resource: str) -> str | None:
    """Why a unit of ``resource`` on a node with these labels is not a device of its own
    ("time-slicing, 4 per GPU", "MIG slices"), or None if it is."""
    prefix = _labels_of(resource)
    strategy = labels.get(f"{prefix}.sharing-strategy", "none")
    replicas = labels.get(f"{prefix}.replicas", "1")
    per_gpu = f", {replicas} per GPU" if replicas.isdigit() and int(replicas) > 1 else ""
    if strategy in SHARING_STRATEGIES:
        return f"{strategy}{per_gpu}"
    if resource.endswith(SHARED_SUFFIX) or per_gpu or labels.get(f"{prefix}.product", "").endswith("-SHARED"):
        # GFD before sharing-strategy labels said it only by replicas and the product's suffix.
        return f"shared{per_gpu}"
    if resource.startswith(MIG_RESOURCE_PREFIX) or (resource == NVIDIA_GPU and labels.get(MIG_STRATEGY_LABEL) == "single"):
        return "MIG slices"
    return None
