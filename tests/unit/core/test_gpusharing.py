"""Which nodes' GPU units share devices, from GPU Feature Discovery's labels."""

import pytest

from distributetrain.core.gpusharing import shared_units

GPU = "nvidia.com/gpu"


@pytest.mark.parametrize("labels,resource,why", [
    ({"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.count": "2",
      "nvidia.com/gpu.product": "Tesla-T4-SHARED"}, GPU, "time-slicing, 4 per GPU"),
    ({"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "2"}, GPU, "mps, 2 per GPU"),
    ({"nvidia.com/gpu.replicas": "4"}, GPU, "shared, 4 per GPU"),  # GFD before the sharing-strategy label
    ({"nvidia.com/gpu.product": "NVIDIA-A10G-SHARED"}, GPU, "shared"),
    ({"nvidia.com/gpu.replicas": "4"}, "nvidia.com/gpu.shared", "shared, 4 per GPU"),  # renameByDefault
    ({"nvidia.com/mig.strategy": "mixed"}, "nvidia.com/mig-1g.10gb", "MIG slices"),
    ({"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb"}, GPU, "MIG slices"),
    ({"nvidia.com/mig-1g.10gb.sharing-strategy": "time-slicing", "nvidia.com/mig-1g.10gb.replicas": "2"},
     "nvidia.com/mig-1g.10gb", "time-slicing, 2 per GPU"),
])
def test_shared_units_say_how(labels, resource, why):
    assert shared_units(labels, resource) == why


@pytest.mark.parametrize("labels,resource", [
    ({}, GPU),
    ({"nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.count": "8",
      "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, GPU),
    ({"nvidia.com/mig.strategy": "mixed"}, GPU),  # mixed: nvidia.com/gpu are the whole GPUs
    ({"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}, "amd.com/gpu"),
])
def test_devices_of_their_own(labels, resource):
    assert shared_units(labels, resource) is None
