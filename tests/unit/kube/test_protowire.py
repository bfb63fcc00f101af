"""protowire: an error the API server answers in protobuf (to the inventory's pod list,
which asks for protobuf) is decoded whole, as its JSON reads, so it keeps its reason and
message: the local API server's own bytes for a 403 (a list by a user with no rights), a
404 (a pod that is not there) and a 410 (a list at a revision etcd has compacted), each
asked once in protobuf and once in JSON (fixtures/; tests/integration/test_inventory_wire.py
asks the live server for the first two again), and any Status harness/podproto writes."""

import json
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
from kubernetes.client.rest import ApiException

from distributetrain.core import errors, exitcodes
from distributetrain.kube import calls, protowire
from distributetrain.manager.reporting.errorcodes import exit_code_of
from harness.podproto import pod_list, status

FIXTURES = Path(__file__).parent / "fixtures"
# The local API server's answers, in protobuf and in JSON, to the same requests.
REAL = ["status-403", "status-404", "status-410"]

TEXT = st.text(min_size=1, max_size=12)  # an empty string is left out, as JSON leaves it
CAUSES = st.lists(st.fixed_dictionaries({}, optional={"reason": TEXT, "message": TEXT, "field": TEXT}),
                  min_size=1, max_size=2)
DETAILS = st.fixed_dictionaries({}, optional={"name": TEXT, "group": TEXT, "kind": TEXT, "uid": TEXT, "causes": CAUSES,
                                              "retryAfterSeconds": st.integers(1, 2 ** 31 - 1)})
CODES = st.one_of(st.integers(-2 ** 31, -1), st.integers(1, 2 ** 31 - 1))  # int32; 0 is left out
STATUSES = st.fixed_dictionaries({"kind": st.just("Status"), "apiVersion": st.just("v1"), "metadata": st.just({})},
                                 optional={"status": st.sampled_from(["Failure", "Success"]), "message": TEXT,
                                           "reason": TEXT, "details": DETAILS, "code": CODES})


@given(STATUSES)
def test_a_protobuf_status_reads_as_its_json(body):
    assert protowire.status(status(body)) == body


@pytest.mark.parametrize("name", REAL)
def test_the_api_server_s_own_protobuf_errors_read_as_its_json_errors(name):
    as_protobuf = (FIXTURES / f"{name}.pb").read_bytes()
    as_json = json.loads((FIXTURES / f"{name}.json").read_text())
    assert protowire.status(as_protobuf) == as_json


@pytest.mark.parametrize("data", [b"", b"{}", b"k8s\x00", b"k8s\x00\x0a\x02\x0a", pod_list([], "1")])
def test_what_is_not_a_protobuf_status_is_none(data):
    assert protowire.status(data) is None


def protobuf_error(code: int, reason: str, message: str) -> ApiException:
    error = ApiException(status=code, reason={403: "Forbidden", 410: "Gone"}[code])
    error.body = status({"metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})
    return error


def test_an_error_in_protobuf_keeps_its_message_and_its_kind():
    denied = ('pods is forbidden: User "system:serviceaccount:ml:distributetrain-manager" cannot list resource '
              '"pods" in API group "" at the cluster scope')
    forbidden = calls.translate(protobuf_error(403, "Forbidden", denied))
    assert (type(forbidden), str(forbidden), exit_code_of(forbidden)) == (errors.Forbidden, denied,
                                                                      exitcodes.PERMISSION_DENIED)
    quota = calls.translate(protobuf_error(
        403, "Forbidden", 'pods "w" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=2, '
                          'used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=2'))
    assert isinstance(quota, errors.QuotaFull)
    expired = calls.translate(protobuf_error(410, "Expired", "The provided continue parameter is too old"))
    assert (type(expired), str(expired)) == (errors.Gone, "The provided continue parameter is too old")
