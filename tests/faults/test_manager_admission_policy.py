"""The manager's ServiceAccount for managers only: with exactly rbac/ applied (its
ValidatingAdmissionPolicy bound to the test's namespace), a tenant who may create pods
there cannot run anything but the manager as distributetrain-manager, and every form of
the manager users apply is admitted."""

import copy
import json
import time

import pytest
import yaml
from kubernetes import client

from distributetrain.cli.jobs import manager_spec
from distributetrain.core import errors
from distributetrain.core.settings import JobSettings
from distributetrain.kube.calls import translate
from harness.polling import poll_until
from jobharness import REPO, SCRIPTS, job_args, manager_pod, node_pool, script_volume
from projectrbac import POLICY

pytestmark = pytest.mark.cluster

POLICY_NAME = "distributetrain-manager-only"
TOKENS_POLICY_NAME = "distributetrain-manager-tokens"
ACCOUNT = "distributetrain-manager"
OTHER_IMAGE = "python:3.11.10-slim-bookworm"  # published in the local registry: any image will do
TENANT = "tenant@example.com"
# The apiserver picks up a new policy and binding from its informers within about a second.
POLICY_ACTIVE_TIMEOUT_S = 30.0
NOWHERE = {"distributetrain.test/nowhere": "true"}  # a manager that must stay Pending


def as_tenant(api_client, namespace):
    """A client acting as a user with the `edit` ClusterRole in the namespace: pods create.
    Returned once RBAC grants it: the authorizer learns a new RoleBinding from its informer,
    and until then RBAC, not the policy under test, refuses the tenant (seen in a full run)."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "tenant-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}]})
    review = client.AuthorizationV1Api(api_client)

    def granted(verb, resource, subresource=""):
        spec = {"user": TENANT, "resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace,
                                                       "subresource": subresource}}
        return review.create_subject_access_review({"apiVersion": "authorization.k8s.io/v1",
                                                    "kind": "SubjectAccessReview", "spec": spec}).status.allowed

    poll_until(lambda: granted("create", "pods") and granted("create", "secrets")
               and granted("create", "serviceaccounts", "token"),
               POLICY_ACTIVE_TIMEOUT_S, f"RBAC granting {TENANT} the edit role in {namespace}")
    return client.CoreV1Api(client.ApiClient(api_client.configuration, header_name="Impersonate-User",
                                             header_value=TENANT))


def manager(namespace, name="mgr"):
    """manager.yaml as the tests apply it, kept Pending (no node matches it)."""
    pod = manager_pod(namespace, name, ["--num-gpus=1"])
    pod["spec"]["nodeSelector"] = dict(NOWHERE)
    return pod


def refusal(create) -> client.ApiException:
    """The API error of ``create``; tried again while the policy is not active yet (a dry
    run, so nothing is created meanwhile)."""
    give_up_at = time.monotonic() + POLICY_ACTIVE_TIMEOUT_S
    while True:
        try:
            create()
        except client.ApiException as e:
            return e
        assert time.monotonic() < give_up_at, "admitted: the policy did not refuse it"
        time.sleep(0.5)


def assert_refused_by_the_policy(error: client.ApiException, words: str, policy: str = POLICY_NAME):
    message = json.loads(error.body)["message"]
    assert error.status == 403, message
    assert f"ValidatingAdmissionPolicy '{policy}'" in message and words in message, message
    # What the manager makes of it: admission's refusal (exit 78), not RBAC's (77).
    assert isinstance(translate(error), errors.AdmissionRefused)


def wait_until_type_checked(api_client, name) -> dict:
    admission = client.AdmissionregistrationV1Api(api_client)
    give_up_at = time.monotonic() + POLICY_ACTIVE_TIMEOUT_S
    while True:
        policy = json.loads(admission.read_validating_admission_policy(name, _preload_content=False).data)
        status = policy.get("status") or {}
        if status.get("observedGeneration") == policy["metadata"]["generation"] or time.monotonic() > give_up_at:
            return status
        time.sleep(0.5)


def test_rbac_ships_the_policies_and_they_type_check(api_client, namespace, rbac):
    names = [d["metadata"]["name"] for d in rbac if d["kind"] == POLICY]
    assert names == [POLICY_NAME, TOKENS_POLICY_NAME]
    for name in names:
        status = wait_until_type_checked(api_client, name)
        assert status.get("observedGeneration") and not status.get("typeChecking", {}).get("expressionWarnings"), \
            status


@pytest.mark.parametrize("change, words", [
    (lambda c: c.update(image=OTHER_IMAGE, command=["sleep", "3600"], args=[]), "runs only the manager image"),
    (lambda c: c.update(image=OTHER_IMAGE), "runs only the manager image"),
    (lambda c: c.update(command=["sh", "-c", "cat /var/run/secrets/kubernetes.io/serviceaccount/token"]),
     "runs only manager.sh"),
    (lambda c: c.update(command=["python", "-m", "distributetrain", "run"]), "runs only manager.sh"),
    (lambda c: c["env"].append({"name": "PYTHONPATH", "value": "/evil"}), "no environment but"),
    (lambda c: c.update(envFrom=[{"configMapRef": {"name": "evil"}}]), "no environment but"),
    (lambda c: c.update(lifecycle={"postStart": {"exec": {"command": ["sh", "-c", "true"]}}}), "no lifecycle hooks"),
    (lambda c: c.update(livenessProbe={"exec": {"command": ["sh", "-c", "true"]}}), "no lifecycle hooks"),
    (lambda c: c.update(volumeMounts=[{"name": "code", "mountPath": "/usr/local/lib/python3.11"}]),
     "no volume but its token"),
], ids=["other-image", "other-image-as-manager-sh", "other-command", "python-directly", "pythonpath",
        "env-from", "post-start-hook", "exec-probe", "volume-over-its-code"])
def test_a_tenant_cannot_run_anything_else_as_the_manager(api_client, namespace, rbac, change, words):
    tenant = as_tenant(api_client, namespace)
    pod = manager(namespace, "intruder")
    change(pod["spec"]["containers"][0])
    if pod["spec"]["containers"][0].get("volumeMounts"):
        pod["spec"]["volumes"] = [{"name": "code", "emptyDir": {}}]
    error = refusal(lambda: tenant.create_namespaced_pod(namespace, pod, dry_run="All"))
    assert_refused_by_the_policy(error, words)
    # Not even for real: nothing was created.
    error = refusal(lambda: tenant.create_namespaced_pod(namespace, pod))
    assert_refused_by_the_policy(error, words)
    assert tenant.list_namespaced_pod(namespace).items == []


@pytest.mark.parametrize("change, words", [
    (lambda s: s["containers"].append({"name": "proxy", "image": OTHER_IMAGE, "command": ["sleep", "3600"]}),
     "runs the manager alone"),
    (lambda s: s.update(initContainers=[{"name": "first", "image": OTHER_IMAGE, "command": ["true"]}]),
     "runs the manager alone"),
    (lambda s: s.update(hostPID=True), "in no host namespace"),
    # The deprecated field: the API server copies it into serviceAccountName.
    (lambda s: s.update(serviceAccount=s.pop("serviceAccountName"), containers=[
        s["containers"][0] | {"image": OTHER_IMAGE}]), "runs only the manager image"),
], ids=["a-second-container", "an-init-container", "host-pid", "deprecated-serviceaccount-field"])
def test_a_managers_pod_holds_the_manager_alone(api_client, namespace, rbac, change, words):
    tenant = as_tenant(api_client, namespace)
    pod = manager(namespace, "intruder")
    change(pod["spec"])
    error = refusal(lambda: tenant.create_namespaced_pod(namespace, pod, dry_run="All"))
    assert_refused_by_the_policy(error, words)


def wait_until_active(tenant, namespace):
    """Once a manager on the host's PID namespace is refused, the policy is in force."""
    pod = manager(namespace, "probe")
    pod["spec"]["hostPID"] = True
    refusal(lambda: tenant.create_namespaced_pod(namespace, pod, dry_run="All"))


def test_an_admitted_manager_cannot_be_changed_into_something_else(api_client, namespace, rbac):
    tenant = as_tenant(api_client, namespace)
    wait_until_active(tenant, namespace)
    tenant.create_namespaced_pod(namespace, manager(namespace))
    # A container's image can be changed on a live pod: the kubelet would restart it so.
    image_change = [{"op": "replace", "path": "/spec/containers/0/image", "value": OTHER_IMAGE}]
    with pytest.raises(client.ApiException) as refused:
        tenant.patch_namespaced_pod("mgr", namespace, image_change)
    assert_refused_by_the_policy(refused.value, "runs only the manager image")
    # `kubectl debug`: an ephemeral container in the manager's pod, refused even to one who
    # may add them (`edit` may not; the cluster's admin here).
    debug = {"spec": {"ephemeralContainers": [{"name": "debugger", "image": OTHER_IMAGE, "command": ["sh"]}]}}
    with pytest.raises(client.ApiException) as refused:
        client.CoreV1Api(api_client).patch_namespaced_pod_ephemeralcontainers("mgr", namespace, debug)
    assert_refused_by_the_policy(refused.value, "runs the manager alone")
    # What the manager itself changes on its pod (its record) still goes through.
    tenant.patch_namespaced_pod("mgr", namespace, {"metadata": {"annotations": {"distributetrain.io/phase": "x"}}})


def every_form_of_the_manager(namespace) -> dict[str, dict]:
    """manager.yaml, manager-job.yaml's pod, and what `submit` creates (also as a Job, and
    queued, with no command: the image's ENTRYPOINT)."""
    settings = JobSettings(job_name="submitted", namespace=namespace, num_gpus=2, image="distributetrain/base:0.1.0")
    template = yaml.safe_load((REPO / "manager-job.yaml").read_text())["spec"]["template"]
    as_job = manager_spec.manager_job(settings, manager_spec.ManagerOptions(as_job=True))["spec"]["template"]
    queued = manager_spec.in_queue(manager_spec.manager_pod(settings, manager_spec.ManagerOptions()), "team-a")
    entrypoint = manager(namespace, "entrypoint")
    del entrypoint["spec"]["containers"][0]["command"]
    timeouts = manager(namespace, "timeouts")
    timeouts["spec"]["containers"][0]["env"].append({"name": "DISTRIBUTETRAIN_API_READ_S", "value": "10"})
    return {
        "manager.yaml": yaml.safe_load((REPO / "manager.yaml").read_text()),
        "manager-job.yaml": {"apiVersion": "v1", "kind": "Pod",
                             "metadata": {"name": "from-job", **template["metadata"]}, "spec": template["spec"]},
        "submit": manager_spec.manager_pod(settings, manager_spec.ManagerOptions()),
        "submit --as-job": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "from-submitted-job",
                                                                            **as_job["metadata"]},
                            "spec": as_job["spec"]},
        "submit, queued": queued,
        "entrypoint": entrypoint,
        "timeouts": timeouts,
    }


def test_every_manager_users_apply_is_admitted(api_client, namespace, rbac):
    tenant = as_tenant(api_client, namespace)
    wait_until_active(tenant, namespace)
    for form, pod in every_form_of_the_manager(namespace).items():
        pod = copy.deepcopy(pod)
        pod["metadata"]["namespace"] = namespace
        try:
            tenant.create_namespaced_pod(namespace, pod, dry_run="All")
        except client.ApiException as e:
            raise AssertionError(f"{form} refused: {e.body}") from None


def test_a_manager_runs_its_job_under_the_policy(cluster, api_client, namespace, rbac, jobs, tmp_path):
    wait_until_active(as_tenant(api_client, namespace), namespace)
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("admitted", job_args(pool, claim, 2))
        assert jobs.exit_code("admitted", timeout_s=180) == 0, jobs.report("admitted")
        assert [name for name in jobs.pods() if name.startswith("admitted-")] == ["admitted-chief"]


def test_a_tenant_cannot_get_a_token_of_the_managers_serviceaccount(api_client, namespace, rbac):
    tenant = as_tenant(api_client, namespace)  # `edit` may request tokens and create Secrets
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": []}}
    error = refusal(lambda: tenant.create_namespaced_service_account_token(ACCOUNT, namespace, request))
    assert_refused_by_the_policy(error, "no TokenRequest by anyone else", TOKENS_POLICY_NAME)
    token_secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
                    "metadata": {"name": "manager-token",
                                 "annotations": {"kubernetes.io/service-account.name": ACCOUNT}}}
    error = refusal(lambda: tenant.create_namespaced_secret(namespace, token_secret))
    assert_refused_by_the_policy(error, "no Secret holding one", TOKENS_POLICY_NAME)
    # Other ServiceAccounts' tokens are none of its business.
    assert tenant.create_namespaced_service_account_token("default", namespace, request).status.token
