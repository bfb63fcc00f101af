"""DRA GPUs per node from ResourceSlices, a DeviceClass's selectors and ResourceClaims."""

from distributetrain.core.placement import dracounting
from distributetrain.core import names
from distributetrain.core.placement.dracounting import Device

EXAMPLE = "gpu.example.com"
NVIDIA = "gpu.nvidia.com"


def device_class(name: str, *expressions: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]}}


def resource_slice(node: str, driver: str, devices: dict[str, dict], generation: int = 1, pool: str = "") -> dict:
    """A node-local slice; ``devices``: name -> attributes as the API types them."""
    return {"metadata": {"name": f"{node}-{driver}-{generation}"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": pool or node, "generation": generation,
                                                                   "resourceSliceCount": 1},
                     "devices": [{"name": name, "attributes": attributes} for name, attributes in devices.items()]}}


def claim(name: str, *devices: tuple[str, str, str], labels: dict | None = None, admin: bool = False) -> dict:
    results = [{"request": "gpus", "driver": d, "pool": p, "device": n, **({"adminAccess": True} if admin else {})}
               for d, p, n in devices]
    return {"metadata": {"name": name, "namespace": "other", "labels": labels or {}},
            "status": {"allocation": {"devices": {"results": results}}} if devices else {}}


def test_the_drivers_own_classes_select_by_driver_and_type():
    example = dracounting.class_selector(device_class(EXAMPLE, f"device.driver == '{EXAMPLE}'"))
    nvidia = dracounting.class_selector(device_class(
        NVIDIA, f"device.driver == '{NVIDIA}' && device.attributes['{NVIDIA}'].type == 'gpu'"))
    assert example == dracounting.ClassSelector(EXAMPLE, (("driver", ("string", EXAMPLE)),))
    assert nvidia == dracounting.ClassSelector(
        NVIDIA, (("driver", ("string", NVIDIA)), (f"{NVIDIA}/type", ("string", "gpu"))))
    gpu = Device(NVIDIA, "n", "gpu-0", ((f"{NVIDIA}/type", ("string", "gpu")),))
    mig = Device(NVIDIA, "n", "mig-0", ((f"{NVIDIA}/type", ("string", "mig")),))
    assert [nvidia.selects(gpu), nvidia.selects(mig), example.selects(gpu)] == [True, False, False]


def test_terms_not_read_are_said_and_not_applied():
    selector = dracounting.class_selector(device_class(
        "c", f"device.driver == '{EXAMPLE}' && device.capacity['{EXAMPLE}'].memory.compareTo(quantity('40Gi')) >= 0",
        "device.driver == 'a' || device.driver == 'b'"))
    assert selector.terms == (("driver", ("string", EXAMPLE)),)
    assert selector.unread == (f"device.capacity['{EXAMPLE}'].memory.compareTo(quantity('40Gi')) >= 0",
                               "device.driver == 'a' || device.driver == 'b'")


def test_free_devices_are_the_class_s_in_the_newest_slices_that_no_other_claim_holds():
    selector = dracounting.class_selector(device_class(EXAMPLE, f"device.driver == '{EXAMPLE}'"))
    slices = [
        resource_slice("a", EXAMPLE, {f"gpu-{i}": {} for i in range(4)}, generation=2),
        resource_slice("a", EXAMPLE, {f"gpu-{i}": {} for i in range(8)}, generation=1),  # stale: republished
        resource_slice("b", EXAMPLE, {"gpu-0": {}, "gpu-1": {}}),
        resource_slice("c", "other.example.com", {"x-0": {}}),  # another driver's: not the class's
        {"metadata": {"name": "shared"}, "spec": {"driver": EXAMPLE, "allNodes": True,  # no node's own
                                                  "pool": {"name": "net", "generation": 1},
                                                  "devices": [{"name": "gpu-9"}]}},
    ]
    job_labels = names.job_labels("j", names.ROLE_GPUS, "uid-1")
    claims = [
        claim("tenant", (EXAMPLE, "a", "gpu-0"), (EXAMPLE, "a", "gpu-1")),
        claim("job-s-own", (EXAMPLE, "b", "gpu-0"), labels=job_labels),  # counted from its pod instead
        claim("admin", (EXAMPLE, "b", "gpu-1"), admin=True),  # admin access takes nothing
        claim("pending"),  # not allocated yet
    ]
    assert dracounting.free_devices(slices, claims, selector) == {"a": 2, "b": 2}


def test_a_booking_says_the_devices_its_claim_asks_for_other_pods_never():
    booking = names.job_labels("j", names.ROLE_WORKER, "uid-1")
    assert dracounting.pod_devices({**booking, names.LABEL_DRA_GPUS: "3"}) == 3
    assert dracounting.pod_devices({names.LABEL_DRA_GPUS: "3"}) == 0
    assert dracounting.pod_devices(booking) == 0
