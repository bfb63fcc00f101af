"""A 403 is RBAC's refusal, a quota's or admission's, told apart by the apiserver's own wording."""

import json

import pytest
from hypothesis import given, strategies as st
from kubernetes.client.rest import ApiException

from distributetrain.core import errors, exitcodes
from distributetrain.kube.calls import translate
from distributetrain.manager.reporting.errorcodes import exit_code_of


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
    assert exit_code_of(error) == exitcodes.QUOTA_EXCEEDED != exitcodes.PERMISSION_DENIED
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
    assert type(error) is errors.Forbidden and exit_code_of(error) == exitcodes.PERMISSION_DENIED


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


def api_error(status: int, reason: str, message: str) -> ApiException:
    error = ApiException(status=status, reason=reason)
    error.body = json.dumps({"kind": "Status", "status": "Failure", "reason": reason, "code": status,
                             "message": message})
    return error


# Answers of a v1.34 apiserver to a pod create: PodSecurity, a ValidatingAdmissionPolicy
# (with reason Forbidden, and with none: 422 Invalid), a webhook, and built-in plugins.
ADMISSION_REFUSALS = [
    (403, "Forbidden", 'pods "demo-worker-0" is forbidden: violates PodSecurity "restricted:latest": '
     'allowPrivilegeEscalation != false (container "worker" must set securityContext.allowPrivilegeEscalation'
     '=false), unrestricted capabilities (container "worker" must set securityContext.capabilities.drop=["ALL"]), '
     'runAsNonRoot != true (pod or container "worker" must set securityContext.runAsNonRoot=true)'),
    (403, "Forbidden", "pods \"intruder\" is forbidden: ValidatingAdmissionPolicy 'distributetrain-manager-only' "
     "with binding 'distributetrain-manager-only-ml' denied request: the ServiceAccount distributetrain-manager "
     "runs only the manager's image"),
    (422, "Invalid", "pods \"demo-chief\" is invalid: : ValidatingAdmissionPolicy 'require-team-label' with "
     "binding 'require-team-label' denied request: failed expression: has(object.metadata.labels.team)"),
    (403, "Forbidden", 'admission webhook "validate.gatekeeper.sh" denied the request: [allowed-repos] container '
     '<worker> has an invalid image repo <distributetrain/base:0.1.0>, allowed repos are ["registry.corp/"]'),
    (400, "BadRequest", 'admission webhook "pod-policy.example.com" denied the request without explanation'),
    (403, "Forbidden", 'pods "demo-worker-0" is forbidden: unable to create new content in namespace ml because '
     "it is being terminated"),
    (403, "Forbidden", 'pods "demo-chief" is forbidden: error looking up service account ml/trainer: '
     'serviceaccount "trainer" not found'),
]


@pytest.mark.parametrize("status,reason,message", ADMISSION_REFUSALS)
def test_admission_refusals_have_their_own_error_and_exit_code(status, reason, message):
    error = translate(api_error(status, reason, message))
    assert type(error) is errors.AdmissionRefused
    assert exit_code_of(error) == exitcodes.ADMISSION_REFUSED
    assert exitcodes.ADMISSION_REFUSED not in (exitcodes.PERMISSION_DENIED, exitcodes.QUOTA_EXCEEDED, exitcodes.USAGE)
    assert message in str(error) and "not a missing RBAC permission" in str(error)


def test_the_api_servers_own_validation_stays_invalid():
    message = 'Pod "j-worker-1" is invalid: spec.containers[0].image: Required value'
    assert type(translate(api_error(422, "Invalid", message))) is errors.Invalid


def test_exit_codes_are_distinct():
    codes = [value for name, value in vars(exitcodes).items() if name.isupper()]
    assert len(codes) == len(set(codes))


def test_admission_not_ready_after_a_restart_is_tried_again():
    # A restarted apiserver's policy or webhook plugin before its caches synced.
    error = translate(api_error(403, "Forbidden", 'pods "demo-chief" is forbidden: not yet ready to handle request'))
    assert type(error) is errors.TransientApiError
