"""--device-class: DRA GPUs in the inventory, the free GPUs followed while waiting, teardown.

A cluster of one device-plugin node (``p``: 2 nvidia.com/gpu) and one DRA node (``d``: 4
devices of the example driver's class in its ResourceSlice, none in its allocatable), as
the local cluster's DRA nodes are (tests/cluster/test_dra.py)."""

import time

import pytest

from distributetrain.core.placement import dracounting, gpuclaims
from distributetrain.core import errors, names
from distributetrain.core.pods import manifests
from distributetrain.core.clock import FakeClock
from distributetrain.core.placement.clusterview import slim_node
from distributetrain.manager.placement import booking, freegpus
from distributetrain.manager.placement.freegpus import FreeGpuWatch, LedgerParts, slim_claim
from distributetrain.manager.watching.teardown import tear_down
from harness.builders import JOB, make_node, sized_node
from harness.kube import FakeKube
from harness.waiting import wait_until

CLASS = "gpu.example.com"
DRA_JOB = JOB.replace(device_class=CLASS, num_gpus=5)
DEVICE_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{CLASS}'"}}]}}


def dra_node(name: str) -> dict:
    return make_node(name).allocatable({"cpu": "64", "memory": "512Gi", "pods": "110"}).obj()


def node_slice(node: str, devices: int) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{CLASS}"},
            "spec": {"driver": CLASS, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}"} for i in range(devices)]}}


def tenant_claim(node: str, *devices: int) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "tenant-gpus", "namespace": "other"},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": CLASS, "pool": node, "device": f"gpu-{i}"} for i in devices]}}}}


def cluster(*objects: dict, pods: list[dict] = ()) -> FakeKube:
    kube = FakeKube(nodes=[sized_node("p", 2), dra_node("d")], pods=pods)
    for obj in objects:
        kube.put(obj)
    return kube


def test_a_dra_node_offers_the_class_s_devices_that_no_claim_holds_beside_device_plugin_gpus():
    kube = cluster(DEVICE_CLASS, node_slice("d", 4), tenant_claim("d", 0))
    ledger = booking.take_inventory(kube, DRA_JOB, FakeClock())
    assert (ledger.free(), ledger.dra_nodes()) == ({"p": 2, "d": 3}, {"d"})


def test_another_job_s_pod_claiming_devices_counts_before_they_are_allocated():
    other = JOB.replace(job_name="other", owner_uid="uid-2", device_class=CLASS)
    worker = gpuclaims.claiming_gpus(other, manifests.worker_pod(other, 0, "d", 2, 0))
    kube = cluster(DEVICE_CLASS, node_slice("d", 4), pods=[worker])
    assert booking.take_inventory(kube, DRA_JOB, FakeClock()).free() == {"p": 2, "d": 2}


def test_without_the_flag_a_dra_node_is_no_candidate():
    kube = cluster(DEVICE_CLASS, node_slice("d", 4))
    assert booking.take_inventory(kube, JOB, FakeClock()).free() == {"p": 2}
    with pytest.raises(errors.UsageError, match="--gpu-resource: no node in the cluster advertises"):
        booking.check_request(booking.take_inventory(FakeKube(nodes=[dra_node("d")]), JOB, FakeClock()), JOB)


def test_a_device_class_the_cluster_lacks_is_bad_input():
    with pytest.raises(errors.UsageError, match="--device-class: the cluster has no DeviceClass 'gpu.example.com'"):
        booking.take_inventory(cluster(node_slice("d", 4)), DRA_JOB, FakeClock())


def test_waiting_follows_slices_and_claims_as_a_fresh_inventory_counts_them():
    selector = dracounting.class_selector(DEVICE_CLASS)
    parts = LedgerParts.for_job(DRA_JOB, None, selector)
    parts.apply_kept_node("p", slim_node(sized_node("p", 2)))
    parts.apply_kept_node("d", slim_node(dra_node("d")))
    assert parts.free() == {"p": 2}  # no slice yet: d has no GPUs
    assert parts.apply_slice(f"d-{CLASS}", node_slice("d", 4))
    assert parts.apply_device_claim("other/tenant-gpus", slim_claim(tenant_claim("d", 0, 1)))
    kube = cluster(DEVICE_CLASS, node_slice("d", 4), tenant_claim("d", 0, 1))
    assert parts.free() == booking.take_inventory(kube, DRA_JOB, FakeClock()).free() == {"p": 2, "d": 2}
    assert parts.apply_device_claim("other/tenant-gpus", None)  # its pod ended: deallocated
    assert parts.free() == {"p": 2, "d": 4}


def test_teardown_deletes_the_job_s_templates_in_one_request():
    kube = FakeKube()
    template = gpuclaims.claim_template(DRA_JOB, 2)
    kube.claim_templates[template["metadata"]["name"]] = template
    other = gpuclaims.claim_template(DRA_JOB.replace(owner_uid="uid-0"), 2)  # an earlier run's: not this one's
    kube.claim_templates[other["metadata"]["name"]] = other
    assert tear_down(kube, DRA_JOB, keep_chief=False) == ["resourceclaimtemplate/j-gpus-2-uid-1"]
    assert sorted(kube.claim_templates) == ["j-gpus-2-uid-0"]
    assert names.claim_template_name("j", 2, "uid-1") not in kube.claim_templates


def test_a_waiting_job_wakes_when_another_tenant_s_claim_frees_dra_gpus(monkeypatch):
    monkeypatch.setattr(freegpus, "waiting_client", lambda same: same)  # followed on the fake itself
    held = tenant_claim("d", 0, 1, 2)
    kube = cluster(DEVICE_CLASS, node_slice("d", 4), held)
    with FreeGpuWatch(kube, DRA_JOB, kube.clock, device_class=dracounting.class_selector(DEVICE_CLASS)) as watch:
        wait_until(lambda: watch.free() is not None, kube.changes, 10, "every list in")
        assert (watch.free(), watch.fits()) == ({"p": 2, "d": 1}, False)
        generation = watch.generation
        kube.remove(held)
        assert watch.wait_until_fits(generation, time.monotonic() + 10)
        assert watch.free() == {"p": 2, "d": 4}
