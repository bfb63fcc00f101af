"""A 403 is RBAC's refusal or a quota's, told apart by the apiserver's own wording."""

import json

import pytest
from hypothesis import given, strategies as st
from kubernetes.client.rest import ApiException

from distributetrain.core import errors, exitcodes
from distributetrain.kube.calls import translate


def api_403(message: str) -> ApiException:
    error = ApiException(status=403, reason="Forbidden")
    error.body = json.dumps({"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                             "message": message})
    return error


# Messages as the apiserver's ResourceQuota and LimitRanger admission plugins word them.
QUOTA_AND_LIMIT_REFUSALS = [
    'pods "demo-worker-0" is forbidden: exceeded quota: compute, requested: requests.cpu=10,'
    "requests.memory=40Gi, used: requests.cpu=0,requests.memory=0, limited: requests.cpu=8,requests.memory=32Gi",
    'pods "demo-chief" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1, '
    "used: requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=4",
    'pods "demo-worker-0" is forbidden: failed quota: compute: must specify limits.cpu for: worker',
    'pods "demo-worker-0" is forbidden: failed quota: compute: must specify limits.cpu,requests.ephemeral-storage',
    'pods "demo-worker-0" is forbidden: status unknown for quota: compute, resource: requests.cpu',
    'pods "demo-worker-0" is forbidden: maximum memory usage per Container is 16Gi, but limit is 40Gi',
    'pods "demo-worker-0" is forbidden: [minimum cpu usage per Pod is 4, but request is 2, '
    "maximum memory usage per Container is 16Gi, but limit is 40Gi]",
    'pods "demo-worker-0" is forbidden: maximum cpu usage per Container is 2.  No limit is specified',
    'pods "demo-worker-0" is forbidden: memory max limit to request ratio per Container is 2, '
    "but provided ratio is 4.000000",
]


@pytest.mark.parametrize("message", QUOTA_AND_LIMIT_REFUSALS)
def test_quota_and_limit_refusals_have_their_own_error_and_exit_code(message):
    error = translate(api_403(message))
    assert isinstance(error, errors.QuotaExceeded)
    assert error.exit_code == exitcodes.QUOTA_EXCEEDED != exitcodes.PERMISSION_DENIED
    assert message in str(error) and "--memory-per-gpu" in str(error)
    assert "\n" not in str(error)


RBAC_REFUSALS = [
    'pods is forbidden: User "system:serviceaccount:ml:distributetrain-manager" cannot create resource '
    '"pods" in API group "" in the namespace "ml"',
    'leases.coordination.k8s.io "distributetrain-placement" is forbidden: User "system:serviceaccount:ml:dt" '
    'cannot update resource "leases" in API group "coordination.k8s.io" in the namespace "ml"',
    "HTTP 403 Forbidden",
]


@pytest.mark.parametrize("message", RBAC_REFUSALS)
def test_rbac_refusals_stay_permission_denied(message):
    error = translate(api_403(message))
    assert type(error) is errors.Forbidden and error.exit_code == exitcodes.PERMISSION_DENIED


@given(
    resource=st.sampled_from(["pods", "secrets", "leases", "events", "quota-pods", "limit-ranges"]),
    verb=st.sampled_from(["create", "get", "list", "watch", "patch", "delete", "update"]),
    user=st.from_regex(r"system:serviceaccount:[a-z0-9-]{1,20}:[a-z0-9-]{1,20}", fullmatch=True),
    namespace=st.from_regex(r"[a-z0-9-]{1,20}", fullmatch=True),
)
def test_no_rbac_refusal_reads_as_a_quota(resource, verb, user, namespace):
    message = (f'{resource} "x" is forbidden: User "{user}" cannot {verb} resource "{resource}" '
               f'in API group "" in the namespace "{namespace}"')
    assert type(errors.forbidden(message)) is errors.Forbidden
