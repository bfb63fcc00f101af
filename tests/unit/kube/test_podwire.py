"""podwire: a pod list in Kubernetes' protobuf encoding gives the pods ``slim`` cuts from JSON.

The encoder below writes pods as the API server does (field numbers of core/v1's
generated.proto, empty strings written, fields the inventory never reads around the
ones it does); the cluster test compares against the real API server's bytes.
"""

import pytest
from hypothesis import given, strategies as st

from distributetrain.kube.podwire import REQUIRED, WireError, decode_pod_list, slim


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def text(number: int, value: str) -> bytes:
    return field(number, value.encode())


def number(field_number: int, value: int) -> bytes:
    return varint(field_number << 3) + varint(value)


def fixed64(field_number: int) -> bytes:
    return varint(field_number << 3 | 1) + b"\x01" * 8


def entries(field_number: int, mapping: dict, quantity: bool) -> bytes:
    return b"".join(field(field_number, text(1, key) + (field(2, text(1, value)) if quantity else text(2, value)))
                    for key, value in mapping.items())


def resources(r: dict) -> bytes:
    return entries(1, r.get("limits") or {}, True) + entries(2, r.get("requests") or {}, True)


def container(c: dict) -> bytes:
    return (text(1, "c") + text(2, "image:1") + field(8, resources(c.get("resources") or {}))
            + number(14, 1) + (text(24, c["restartPolicy"]) if "restartPolicy" in c else b""))


def requirement(r: dict) -> bytes:
    return text(1, r["key"]) + text(2, r["operator"]) + b"".join(text(3, v) for v in r["values"])


def affinity(a: dict) -> bytes:
    if "nodeAffinity" not in a:
        return field(2, b"")  # a pod affinity only
    terms = a["nodeAffinity"].get(REQUIRED, {}).get("nodeSelectorTerms", [])
    selector = b"".join(field(1, b"".join(field(1, requirement(r)) for r in t["matchExpressions"])
                              + b"".join(field(2, requirement(r)) for r in t["matchFields"])) for t in terms)
    return field(1, field(1, selector) + field(2, b"preferred"))


def pod(p: dict) -> bytes:
    m, s = p["metadata"], p["spec"]
    metadata = (text(1, m.get("name", "")) + text(3, m.get("namespace", "")) + text(5, m.get("uid", ""))
                + number(7, 3) + entries(11, m.get("labels") or {}, False) + field(17, b"\x0a\x07manager" * 20))
    spec = (b"".join(field(2, container(c)) for c in s["containers"]) + text(3, "Always") + number(4, 30)
            + text(10, s.get("nodeName", "")) + (field(18, affinity(s["affinity"])) if "affinity" in s else b"")
            + b"".join(field(20, container(c)) for c in s.get("initContainers") or ())
            + entries(32, s.get("overhead") or {}, True)
            + (field(40, resources(s["resources"])) if "resources" in s else b"") + fixed64(99))
    status = text(1, p["status"].get("phase", "")) + field(2, text(1, "Ready") + text(2, "True")) + text(7, "10.0.0.1")
    return field(1, metadata) + field(2, spec) + field(3, status)


def pod_list(pods: list[dict], version: str = "42", token: str = "") -> bytes:
    listed = field(1, text(2, version) + text(3, token)) + b"".join(field(2, pod(p)) for p in pods)
    return b"k8s\x00" + field(1, text(1, "v1") + text(2, "PodList")) + field(2, listed) + text(3, "") + text(4, "")


NAMES = st.text("abcxyz-./", min_size=1, max_size=8)
AMOUNTS = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"]),
                          st.sampled_from(["1", "250m", "2Gi", "0"]), max_size=3)
RESOURCES = st.fixed_dictionaries({}, optional={"limits": AMOUNTS, "requests": AMOUNTS})
CONTAINERS = st.fixed_dictionaries({}, optional={"resources": RESOURCES, "restartPolicy": st.just("Always")})
REQUIREMENTS = st.fixed_dictionaries({"key": NAMES, "operator": st.sampled_from(["In", "NotIn"]),
                                      "values": st.lists(NAMES, max_size=2)})
TERMS = st.fixed_dictionaries({"matchExpressions": st.lists(REQUIREMENTS, max_size=2),
                               "matchFields": st.lists(REQUIREMENTS, max_size=2)})
AFFINITIES = st.one_of(st.just({"podAffinity": {}}), st.builds(
    lambda terms: {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}, st.lists(TERMS, max_size=2)))
PODS = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"name": NAMES, "uid": NAMES}, optional={
        "namespace": NAMES, "labels": st.dictionaries(NAMES, st.text("ab", max_size=2), max_size=3)}),
    "spec": st.fixed_dictionaries({"containers": st.lists(CONTAINERS, max_size=3)}, optional={
        "initContainers": st.lists(CONTAINERS, min_size=1, max_size=2), "nodeName": NAMES, "affinity": AFFINITIES,
        "overhead": AMOUNTS, "resources": RESOURCES}),
    "status": st.fixed_dictionaries({}, optional={"phase": st.sampled_from(["Pending", "Running", "Failed"])}),
})


@given(st.lists(PODS, max_size=4), NAMES)
def test_protobuf_pods_read_as_their_json_cut_by_slim(pods, token):
    assert decode_pod_list(pod_list(pods, "17", token)) == ([slim(p) for p in pods], "17", token)


def test_what_the_inventory_reads_survives_the_cut():
    full = {"metadata": {"name": "w", "uid": "u", "labels": {"job": "j"}, "managedFields": [{}]},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i", "env": [{"name": "X"}],
                                                      "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                     "initContainers": [{"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}],
                     "volumes": [{"name": "v"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}}
    assert slim(full) == {
        "metadata": {"name": "w", "uid": "u", "labels": {"job": "j"}},
        "spec": {"nodeName": "n", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                 "initContainers": [{"restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running"}}


@pytest.mark.parametrize("body", [b'{"kind": "PodList"}', b"k8s\x00", b"k8s\x00" + field(2, b"\x12\x05ab")])
def test_bytes_that_are_not_a_protobuf_pod_list_are_an_error_not_a_guess(body):
    with pytest.raises(WireError):
        decode_pod_list(body)


def test_long_fields_and_numbered_fields_read_past_one_byte_lengths():
    """Lengths of one, two and three bytes (a pod over 16 KiB) and keys of two bytes."""
    big = {"metadata": {"name": "big", "uid": "u", "labels": {"note": "x" * 20_000}},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}], "nodeName": "n",
                    "initContainers": [{"restartPolicy": "Always"}], "overhead": {"cpu": "1"}},
           "status": {"phase": "Running"}}
    assert decode_pod_list(pod_list([big, big | {"metadata": {"name": "small", "uid": "v"}}])) == \
        ([slim(big), slim(big | {"metadata": {"name": "small", "uid": "v"}})], "42", "")
