"""podwire: a pod list in Kubernetes' protobuf encoding gives the pods ``slim`` cuts from
JSON, however its bytes arrive (harness/podproto writes lists as the API server does; the
cluster test compares against the real API server's bytes).
"""

import json

import pytest
from hypothesis import given, strategies as st

from distributetrain.kube.podwire import PROTOBUF, REQUIRED, WireError, read_pod_list, slim
from harness.podproto import ENVELOPE_TRAILER, field, pod_list


def read(body: bytes, chunk_size: int | None = None, content_type: str = PROTOBUF) -> tuple[list[dict], str, str]:
    """The pods, resourceVersion and continue token of ``body``, arriving ``chunk_size``
    bytes at a time."""
    size = chunk_size or max(len(body), 1)
    pods: list[dict] = []
    version, token = read_pod_list(content_type, (body[i:i + size] for i in range(0, len(body), size)), pods.append)
    return pods, version, token


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


@given(st.lists(PODS, max_size=4), NAMES, st.integers(1, 300))
def test_protobuf_pods_read_as_their_json_cut_by_slim_in_chunks_of_any_size(pods, token, chunk_size):
    assert read(pod_list(pods, "17", token), chunk_size) == ([slim(p) for p in pods], "17", token)


@given(st.lists(PODS, max_size=3), st.integers(1, 50))
def test_a_json_list_is_read_whole_and_cut_the_same(pods, chunk_size):
    body = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "9", "continue": "next"},
                       "items": pods}).encode()
    assert read(body, chunk_size, "application/json") == ([slim(p) for p in pods], "9", "next")


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


@pytest.mark.parametrize("body", [b'{"kind": "PodList"}', b"", b"k8s\x00", b"k8s\x00" + field(2, b"\x12\x05ab"),
                                  b"k8s\x00" + field(2, b"\x12\x01ab") + field(3, b"abcd")])
def test_bytes_that_are_not_a_protobuf_pod_list_are_an_error_not_a_guess(body):
    with pytest.raises(WireError):
        read(body, 3)


@given(st.lists(PODS, min_size=1, max_size=3), st.data())
def test_a_list_cut_short_is_an_error_not_fewer_pods(pods, data):
    body = pod_list(pods)
    list_end = len(body) - len(ENVELOPE_TRAILER)  # after it, only the envelope's empty strings
    with pytest.raises(WireError):
        read(body[:data.draw(st.integers(0, list_end - 1))], data.draw(st.integers(1, 64)))


def test_long_fields_and_numbered_fields_read_past_one_byte_lengths():
    """Lengths of one, two and three bytes (a pod over 16 KiB) and keys of two bytes."""
    big = {"metadata": {"name": "big", "uid": "u", "labels": {"note": "x" * 20_000}},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}], "nodeName": "n",
                    "initContainers": [{"restartPolicy": "Always"}], "overhead": {"cpu": "1"}},
           "status": {"phase": "Running"}}
    assert read(pod_list([big, big | {"metadata": {"name": "small", "uid": "v"}}]), 1000) == \
        ([slim(big), slim(big | {"metadata": {"name": "small", "uid": "v"}})], "42", "")
