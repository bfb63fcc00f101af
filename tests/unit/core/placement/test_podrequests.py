"""What a pod asks of its node besides GPUs, by the scheduler's NodeResourcesFit rule."""

import pytest

from distributetrain.core.placement.podrequests import amount, node_allocatable, pod_request, pod_requests


def container(**requests):
    return {"name": "c", "resources": {"requests": dict(requests)}}


@pytest.mark.parametrize("resource,quantity,expected", [
    ("cpu", "1.5", 1500), ("cpu", "250m", 250), ("cpu", 2, 2000), ("cpu", "0.0001", 1),  # rounded up
    ("memory", "1Gi", 2**30), ("memory", "1G", 10**9), ("ephemeral-storage", "10Gi", 10 * 2**30),
    ("nvidia.com/gpu", "1500m", 2),
])
def test_quantities_in_whole_units(resource, quantity, expected):
    assert amount(resource, quantity) == expected


@pytest.mark.parametrize("bad", ["lots", "-1"])
def test_bad_quantities(bad):
    with pytest.raises(ValueError):
        amount("cpu", bad)


def test_containers_add_up_and_init_containers_count_at_their_peak():
    spec = {"containers": [container(cpu="1"), container(cpu="500m")], "initContainers": [container(cpu="2")]}
    assert pod_request(spec, "cpu") == 2000
    spec["initContainers"] = [container(cpu="1")]
    assert pod_request(spec, "cpu") == 1500


def test_a_sidecar_runs_beside_the_app_and_beside_later_init_containers():
    sidecar = container(memory="1Gi") | {"restartPolicy": "Always"}
    spec = {"containers": [container(memory="2Gi")], "initContainers": [sidecar, container(memory="4Gi")]}
    assert pod_request(spec, "memory") == 5 * 2**30  # the sidecar and the second init container at once


def test_overhead_is_added_and_a_pod_level_request_replaces_its_containers():
    spec = {"containers": [container(cpu="1")], "overhead": {"cpu": "250m"}}
    assert pod_request(spec, "cpu") == 1250
    assert pod_request(spec | {"resources": {"requests": {"cpu": "3"}}}, "cpu") == 3250


def test_a_limit_without_a_request_is_the_request():
    spec = {"containers": [{"name": "c", "resources": {"limits": {"memory": "1Gi", "cpu": "2"}}}]}
    assert pod_requests(spec) == {"cpu": 2000, "memory": 2**30, "ephemeral-storage": 0, "pods": 1}


def test_a_pod_with_no_requests_still_takes_a_pod_slot():
    assert pod_requests({"containers": [{"name": "c"}]}) == {"cpu": 0, "memory": 0, "ephemeral-storage": 0, "pods": 1}


def test_a_node_s_allocatable_leaves_out_what_it_does_not_report():
    status = {"allocatable": {"cpu": "3500m", "memory": "15Gi", "pods": "110", "nvidia.com/gpu": "1"}}
    assert node_allocatable(status) == {"cpu": 3500, "memory": 15 * 2**30, "pods": 110}
    assert node_allocatable({}) == {}
