"""The manager's ServiceAccount for managers only: with exactly rbac/ applied (its
ValidatingAdmissionPolicies bound to the test's namespace), a tenant who may create pods
there (`edit`) tries every way to run code of their own as distributetrain-manager, or
to get its token: each is refused by the API server, or admitted and runs none of its
code (shown by what that code would have written). Every form of the manager users apply
is admitted, and so is what the platform's webhooks add where the platform lists it.

The refused attempts are server-side dry runs in one namespace bound for the whole module;
the few that must run (the manager's arguments, its working directory) run for real.
"""

import copy
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import yaml
from kubernetes import client

from clusterfixtures import TEST_NAMESPACE_LABEL, namespace_name
from distributetrain.cli.jobs import manager_spec
from distributetrain.core import errors
from distributetrain.core.settings import JobSettings
from distributetrain.kube.calls import translate
from harness.polling import poll_until
from jobharness import REPO, SCRIPTS, Jobs, job_args, manager_pod, node_pool, script_volume
from projectrbac import POLICY, POLICY_BINDING, apply_rbac, delete_shared_bindings, rbac_documents

pytestmark = pytest.mark.cluster

POLICY_NAME = "distributetrain-manager-only"
TOKENS_POLICY_NAME = "distributetrain-manager-tokens"
EXEC_POLICY_NAME = "distributetrain-manager-exec"
ACCOUNT = "distributetrain-manager"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
OTHER_IMAGE = "python:3.11.10-slim-bookworm"  # published in the local registry: any image will do
TENANT = "tenant@example.com"
# The apiserver picks up a new policy and binding from its informers within about a second.
POLICY_ACTIVE_TIMEOUT_S = 30.0

NOWHERE = {"distributetrain.test/nowhere": "true"}  # a manager that must stay Pending
# What a platform's webhooks add to every pod (a proxy's variables, a CA bundle), as its
# team lists them in the policy; with, by mistake, names and paths that would run other
# code, which the policy must ignore.
PLATFORM_ENVIRONMENT = ["HTTPS_PROXY", "NO_PROXY"]
PLATFORM_MOUNT_PATH = "/etc/ssl/certs"
PLATFORM_LISTS = {"platformEnvironmentListed": [*PLATFORM_ENVIRONMENT, "LD_PRELOAD", "PYTHONPATH"],
                  "platformMountPathsListed": [PLATFORM_MOUNT_PATH, "/usr/local/lib/python3.11", "/etc",
                                               "/run/secrets/kubernetes.io"]}
# Printed (or written) by a tenant's code if it ever runs.
MARKER = "TENANT-CODE-RAN"
PLANTED_CODE = f"import sys\nprint({MARKER!r}, file=sys.stderr)\n"
MANAGER_ENDS_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Policed:
    """A namespace of the module's, bound to rbac/'s policies, and a tenant there."""

    namespace: str
    tenant: client.CoreV1Api
    jobs: Jobs
    policy: str = POLICY_NAME  # the name the pods' policy is refused under


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
               and granted("create", "serviceaccounts", "token") and granted("create", "pods", "exec"),
               POLICY_ACTIVE_TIMEOUT_S, f"RBAC granting {TENANT} the edit role in {namespace}")
    return client.CoreV1Api(client.ApiClient(api_client.configuration, header_name="Impersonate-User",
                                             header_value=TENANT))


def with_platform_lists(api_client, documents: list[dict], namespace: str) -> str:
    """The pods' policy as the platform team fills its lists (PLATFORM_LISTS), under a name
    of its own, bound to this namespace in place of the shipped one (which other tests'
    namespaces keep as shipped); its name."""
    admission = client.AdmissionregistrationV1Api(api_client)
    policy = copy.deepcopy(next(d for d in documents if d["kind"] == POLICY and d["metadata"]["name"] == POLICY_NAME))
    policy["metadata"]["name"] = f"{POLICY_NAME}-with-lists-{namespace}"
    for variable in policy["spec"]["variables"]:
        if variable["name"] in PLATFORM_LISTS:
            variable["expression"] = json.dumps(PLATFORM_LISTS[variable["name"]])
    admission.create_validating_admission_policy(policy)
    binding = next(d for d in documents if d["kind"] == POLICY_BINDING and d["spec"]["policyName"] == POLICY_NAME)
    admission.delete_validating_admission_policy_binding(binding["metadata"]["name"])
    admission.create_validating_admission_policy_binding({
        "metadata": {"name": policy["metadata"]["name"]},
        "spec": {**binding["spec"], "policyName": policy["metadata"]["name"]}})
    return policy["metadata"]["name"]


@contextmanager
def policed_namespace(api_client, test: str, platform: bool) -> Iterator[Policed]:
    namespace = namespace_name(test)
    core = client.CoreV1Api(api_client)
    admission = client.AdmissionregistrationV1Api(api_client)
    core.create_namespace({"metadata": {"name": namespace, "labels": {TEST_NAMESPACE_LABEL: "true"}}})
    documents = apply_rbac(api_client, namespace)
    policy = with_platform_lists(api_client, documents, namespace) if platform else POLICY_NAME
    try:
        tenant = as_tenant(api_client, namespace)
        wait_until_active(tenant, namespace)
        if platform:
            wait_until_the_platforms_lists_hold(tenant, namespace)
        yield Policed(namespace, tenant, Jobs(api_client, namespace), policy)
    finally:
        delete_shared_bindings(api_client, documents)
        if platform:
            admission.delete_validating_admission_policy_binding(policy)
            admission.delete_validating_admission_policy(policy)
        core.delete_namespace(namespace)


@pytest.fixture(scope="module")
def policed(cluster, api_client) -> Iterator[Policed]:
    """The module's namespace under rbac/'s policies as shipped."""
    with policed_namespace(api_client, "manager-admission-policy", platform=False) as policed:
        yield policed


@pytest.fixture(scope="module")
def platform_policed(cluster, api_client) -> Iterator[Policed]:
    """A namespace under the pods' policy with the platform's lists filled in."""
    with policed_namespace(api_client, "manager-admission-policy-platform", platform=True) as policed:
        yield policed


@pytest.fixture(scope="module")
def manager_node(cluster) -> Iterator[dict[str, str]]:
    """A node of the module's own for the managers that run: the nodeSelector to it."""
    with node_pool(cluster, {"m": 0}) as pool:
        yield {"distributetrain.test/nodes": pool.prefix}


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


def dry_run_refusal(policed: Policed, pod: dict) -> client.ApiException:
    return refusal(lambda: policed.tenant.create_namespaced_pod(policed.namespace, pod, dry_run="All"))


def wait_until_type_checked(api_client, name) -> dict:
    admission = client.AdmissionregistrationV1Api(api_client)
    give_up_at = time.monotonic() + POLICY_ACTIVE_TIMEOUT_S
    while True:
        policy = json.loads(admission.read_validating_admission_policy(name, _preload_content=False).data)
        status = policy.get("status") or {}
        if status.get("observedGeneration") == policy["metadata"]["generation"] or time.monotonic() > give_up_at:
            return status
        time.sleep(0.5)


def wait_until_active(tenant, namespace):
    """Once a manager on the host's PID namespace is refused (403), the policy is in force."""
    pod = manager(namespace, "probe")
    pod["spec"]["hostPID"] = True
    last: list[str] = []

    def refused() -> bool:
        try:
            tenant.create_namespaced_pod(namespace, pod, dry_run="All")
        except client.ApiException as e:
            last[:] = [e.body]
            return e.status == 403
        last[:] = ["admitted"]
        return False

    poll_until(refused, POLICY_ACTIVE_TIMEOUT_S, lambda: f"the policy refusing a manager on hostPID: {last}")


def wait_until_the_platforms_lists_hold(tenant, namespace):
    """Once a manager with what the platform lists is admitted, the policy with its lists
    is the one bound."""
    last: list[str] = []

    def admitted() -> bool:
        try:
            tenant.create_namespaced_pod(namespace, with_platform_additions(manager(namespace, "probe")), dry_run="All")
        except client.ApiException as e:
            last[:] = [e.body]
            return False
        return True

    poll_until(admitted, POLICY_ACTIVE_TIMEOUT_S, lambda: f"the platform's lists in force: {last}")


def test_rbac_ships_the_policies_and_they_type_check(api_client, policed):
    names = [d["metadata"]["name"] for d in rbac_documents(policed.namespace) if d["kind"] == POLICY]
    assert names == [POLICY_NAME, TOKENS_POLICY_NAME, EXEC_POLICY_NAME]
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
     "mounts nothing but its token"),
], ids=["other-image", "other-image-as-manager-sh", "other-command", "python-directly", "pythonpath",
        "env-from", "post-start-hook", "exec-probe", "volume-over-its-code"])
def test_a_tenant_cannot_run_anything_else_as_the_manager(policed, change, words):
    pod = manager(policed.namespace, "intruder")
    change(pod["spec"]["containers"][0])
    if pod["spec"]["containers"][0].get("volumeMounts"):
        pod["spec"]["volumes"] = [{"name": "code", "emptyDir": {}}]
    assert_refused_by_the_policy(dry_run_refusal(policed, pod), words)
    # Not even for real: nothing was created.
    error = refusal(lambda: policed.tenant.create_namespaced_pod(policed.namespace, pod))
    assert_refused_by_the_policy(error, words)
    assert "intruder" not in policed.jobs.pods()


@pytest.mark.parametrize("change, words", [
    (lambda s: s["containers"].append({"name": "proxy", "image": OTHER_IMAGE, "command": ["sleep", "3600"]}),
     "runs the manager alone"),
    (lambda s: s.update(initContainers=[{"name": "first", "image": OTHER_IMAGE, "command": ["true"]}]),
     "runs the manager alone"),
    (lambda s: s.update(hostPID=True), "in no host or shared process namespace"),
    # The deprecated field: the API server copies it into serviceAccountName.
    (lambda s: s.update(serviceAccount=s.pop("serviceAccountName"), containers=[
        s["containers"][0] | {"image": OTHER_IMAGE}]), "runs only the manager image"),
], ids=["a-second-container", "an-init-container", "host-pid", "deprecated-serviceaccount-field"])
def test_a_managers_pod_holds_the_manager_alone(policed, change, words):
    pod = manager(policed.namespace, "intruder")
    change(pod["spec"])
    assert_refused_by_the_policy(dry_run_refusal(policed, pod), words)


def tenant_package() -> dict:
    """A ConfigMap projection that lays a package named distributetrain out as files."""
    return {"configMap": {"name": "tenant-code", "items": [
        {"key": "init", "path": "distributetrain/__init__.py"}, {"key": "main", "path": "distributetrain/__main__.py"}]}}


def standard_token_sources() -> list[dict]:
    """The token volume's sources as the API server's ServiceAccount admission plugin writes them."""
    return [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                            "fieldPath": "metadata.namespace"}}]}}]


def mounted(volume: dict, mount: dict | None = None) -> Callable[[dict], None]:
    """A change: ``volume`` in the pod, mounted at the token's path (``mount`` adds to it)."""
    def change(spec: dict) -> None:
        spec["volumes"] = [volume]
        spec["containers"][0]["volumeMounts"] = [{"name": volume["name"], "mountPath": TOKEN_PATH, **(mount or {})}]
    return change


def container(**fields) -> Callable[[dict], None]:
    return lambda spec: spec["containers"][0].update(fields)


# Each way around the policy as it stood before (it read a volume's mount path only), and
# what refuses it now.
WALKS_AROUND = {
    # Issue 45: the account's token and a package named distributetrain in one projected
    # volume at the token's path, made the working directory: `python -m distributetrain`
    # would import the package, with the token beside it.
    "token-and-package-as-the-working-directory": (
        lambda spec: (mounted({"name": "walk", "projected": {"sources": [*standard_token_sources(),
                                                                         tenant_package()]}})(spec),
                      spec["containers"][0].update(workingDir=TOKEN_PATH)),
        "no workingDir"),
    "token-and-package-at-the-token-path": (
        mounted({"name": "walk", "projected": {"sources": [*standard_token_sources(), tenant_package()]}}),
        "mounts nothing but its token"),
    # The admission plugin takes a volume named kube-api-access-* for the token's and mounts
    # it at the token's path itself: no mount in the spec at all.
    "a-volume-named-as-the-plugin-names-the-tokens": (
        lambda spec: spec.update(volumes=[{"name": "kube-api-access-tenant", **tenant_package()}]),
        "mounts nothing but its token"),
    "a-subpath-of-the-token-volume": (
        mounted({"name": "kube-api-access-own", "projected": {"sources": standard_token_sources()}},
                {"subPath": "token"}),
        "mounts nothing but its token"),
    "a-working-directory": (container(workingDir="/tmp"), "no workingDir"),
    # The kubelet mounts a file of its own at terminationMessagePath: over manager.sh here.
    "a-termination-message-over-manager-sh": (container(terminationMessagePath="/usr/local/bin/manager.sh"),
                                              "the default terminationMessagePath"),
    # What `kubectl attach` would write to.
    "stdin": (container(stdin=True), "no stdin"),
    # Another manager's identity: this one would adopt, follow and delete that job's pods.
    "another-jobs-uid": (lambda spec: spec["containers"][0]["env"].__setitem__(
        2, {"name": "MANAGER_POD_UID", "value": "uid-of-another-manager"}), "no environment but MANAGER_POD_*"),
    # The kubelet hands a CSI driver that asks for them the pod's ServiceAccount tokens: an
    # unmounted volume is set up all the same.
    "a-csi-volume": (lambda spec: spec.update(volumes=[{"name": "store", "csi": {
        "driver": "secrets-store.csi.k8s.io", "volumeAttributes": {"secretProviderClass": "tenants"}}}]),
        "mounts nothing but its token"),
    "a-claim": (lambda spec: spec.update(volumes=[{"name": "claim", "persistentVolumeClaim": {"claimName": "x"}}]),
                "mounts nothing but its token"),
    "shared-process-namespace": (lambda spec: spec.update(shareProcessNamespace=True),
                                 "no host or shared process namespace"),
    # The exec policy tells the manager's container by its name.
    "a-container-named-otherwise": (container(name="main"), "one container named manager"),
}


@pytest.mark.parametrize("walk", WALKS_AROUND)
def test_a_tenant_cannot_walk_around_the_policy(policed, walk):
    change, words = WALKS_AROUND[walk]
    pod = manager(policed.namespace, "intruder")
    change(pod["spec"])
    assert_refused_by_the_policy(dry_run_refusal(policed, pod), words)


def with_ca_bundle(pod: dict, volume: dict | None = None) -> dict:
    """``pod`` with a volume (by default a ConfigMap, a CA bundle) at the platform's path."""
    pod["spec"]["volumes"] = [{"name": "ca-bundle", **(volume or {"configMap": {"name": "ca-bundle"}})}]
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "ca-bundle", "mountPath": PLATFORM_MOUNT_PATH, "readOnly": True}]
    return pod


def with_platform_additions(pod: dict, volume: dict | None = None) -> dict:
    """``pod`` as the platform's webhooks change it: its proxy's variables, and a CA bundle."""
    pod["spec"]["containers"][0]["env"] += [{"name": name, "value": "http://proxy.example:3128"}
                                            for name in PLATFORM_ENVIRONMENT]
    return with_ca_bundle(pod, volume)


def test_what_the_platform_lists_is_admitted_never_what_would_run_other_code(platform_policed):
    """The platform team lists its webhooks' variables and paths in the policy
    (PLATFORM_LISTS): a manager with them is admitted; names and paths of the lists that
    would change what runs are not, nor a volume at the platform's path that is not plain
    files."""
    policed = platform_policed
    policed.tenant.create_namespaced_pod(policed.namespace, with_platform_additions(manager(policed.namespace)),
                                         dry_run="All")
    for name in ("LD_PRELOAD", "PYTHONPATH"):
        pod = manager(policed.namespace)
        pod["spec"]["containers"][0]["env"].append({"name": name, "value": "/etc/ssl/certs/x"})
        assert_refused_by_the_policy(dry_run_refusal(policed, pod), "and the platform's [HTTPS_PROXY, NO_PROXY]",
                                     policed.policy)
    for path in ("/usr/local/lib/python3.11", "/etc", "/run/secrets/kubernetes.io"):
        pod = with_platform_additions(manager(policed.namespace))
        pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] = path
        assert_refused_by_the_policy(dry_run_refusal(policed, pod), "files at the platform's [/etc/ssl/certs]",
                                     policed.policy)
    for volume in ({"persistentVolumeClaim": {"claimName": "x"}},
                   {"projected": {"sources": [{"serviceAccountToken": {"path": "token", "audience": "vault"}}]}}):
        pod = with_platform_additions(manager(policed.namespace), volume)
        assert_refused_by_the_policy(dry_run_refusal(policed, pod), "files at the platform's [/etc/ssl/certs]",
                                     policed.policy)


def connect(tenant: client.CoreV1Api, namespace: str, pod: str, subresource: str,
            container: str | None) -> client.ApiException:
    """The tenant's `kubectl exec POD -c CONTAINER -- true` (or attach), up to admission: a
    plain POST, so what is not refused fails after it (no node, no upgrade)."""
    query = [("stdout", "true"), *([("container", container)] if container else []),
             *([("command", "true")] if subresource == "exec" else [])]
    with pytest.raises(client.ApiException) as failed:
        tenant.api_client.call_api(f"/api/v1/namespaces/{namespace}/pods/{pod}/{subresource}", "POST",
                                   query_params=query, auth_settings=["BearerToken"], _preload_content=False)
    return failed.value


def test_no_exec_or_attach_into_the_managers_container(policed):
    namespace, tenant = policed.namespace, policed.tenant
    tenant.create_namespaced_pod(namespace, manager(namespace, "exec-target"))
    other = manager(namespace, "other-pod")
    other["spec"].update(serviceAccountName="default", containers=[
        {"name": "chief", "image": OTHER_IMAGE, "command": ["sleep", "3600"]}])
    tenant.create_namespaced_pod(namespace, other)
    try:
        for subresource, container in (("exec", "manager"), ("exec", None), ("attach", "manager")):
            assert_refused_by_the_policy(connect(tenant, namespace, "exec-target", subresource, container),
                                         "no exec or attach into a container named manager", EXEC_POLICY_NAME)
        # Any other container, as kubectl names it: past admission (then no node to run on).
        error = connect(tenant, namespace, "other-pod", "exec", "chief")
        assert error.status == 400 and "host" in json.loads(error.body)["message"], error.body
    finally:
        for name in ("exec-target", "other-pod"):
            tenant.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def run_to_its_end(policed: Policed, pod: dict) -> tuple[int, str]:
    """Create ``pod`` as the tenant; its exit code and its log (with its termination message)."""
    name = pod["metadata"]["name"]
    policed.tenant.create_namespaced_pod(policed.namespace, pod)
    try:
        exit_code = policed.jobs.exit_code(name, MANAGER_ENDS_TIMEOUT_S)
        status = policed.jobs.pod(name)["status"]["containerStatuses"][0]["state"]["terminated"]
        return exit_code, policed.jobs.logs(name) + (status.get("message") or "")
    finally:
        policed.tenant.delete_namespaced_pod(name, policed.namespace, grace_period_seconds=0)


def test_a_kubeconfig_in_the_managers_arguments_runs_none_of_its_code(platform_policed, manager_node):
    """The manager's arguments are free (they are the job), and the platform's path holds
    whatever ConfigMap the tenant mounts there: a kubeconfig whose exec plugin runs a command
    next to the token. The manager in a pod acts as its ServiceAccount and never reads it."""
    policed = platform_policed
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "tenant",
                  "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443"}}],
                  "contexts": [{"name": "tenant", "context": {"cluster": "c", "user": "u"}}],
                  "users": [{"name": "u", "user": {"exec": {
                      "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "sh",
                      "args": ["-c", f"echo {MARKER} > /dev/termination-log; echo {MARKER} >&2; exit 1"]}}}]}
    policed.tenant.create_namespaced_config_map(policed.namespace, {
        "metadata": {"name": "tenant-kubeconfig"}, "data": {"config": yaml.safe_dump(kubeconfig)}})
    pod = with_ca_bundle(manager(policed.namespace, "argued"), {"configMap": {"name": "tenant-kubeconfig"}})
    pod["spec"]["nodeSelector"] = manager_node
    pod["spec"]["containers"][0]["args"] = [
        "--num-gpus=1", "--image=distributetrain/base:0.1.0", f"--node-selector={next(iter(NOWHERE))}=true",
        f"--kubeconfig={PLATFORM_MOUNT_PATH}/config", "--context=tenant"]
    exit_code, output = run_to_its_end(policed, pod)
    assert MARKER not in output, output
    # It ran as its ServiceAccount: it read the cluster's nodes, none of which the job may use.
    assert exit_code == 2 and "advertise" in output, (exit_code, output)


def test_the_managers_interpreter_imports_nothing_from_its_working_directory(policed, manager_node):
    """Were a working directory ever admitted: the manager image, run (as another
    ServiceAccount, which the policy lets through) from a directory holding a package named
    distributetrain and a csv.py (which the version query's importlib.metadata imports),
    runs its own code: bad input, exit 2, and nothing of theirs."""
    policed.tenant.create_namespaced_config_map(policed.namespace, {
        "metadata": {"name": "tenant-code"}, "data": {"init": PLANTED_CODE, "main": PLANTED_CODE,
                                                      "csv": PLANTED_CODE}})
    pod = manager(policed.namespace, "planted")
    pod["spec"].update(serviceAccountName="default", nodeSelector=manager_node, volumes=[{"name": "code", **{
        "configMap": {"name": "tenant-code", "items": [*tenant_package()["configMap"]["items"],
                                                      {"key": "csv", "path": "csv.py"}]}}}])
    pod["spec"]["containers"][0].update(workingDir="/planted", args=["--num-gpus=0", "--image=x"],
                                        volumeMounts=[{"name": "code", "mountPath": "/planted"}])
    exit_code, output = run_to_its_end(policed, pod)
    assert MARKER not in output, output
    assert exit_code == 2 and "distributetrain: error: --num-gpus" in output, (exit_code, output)


def test_an_admitted_manager_cannot_be_changed_into_something_else(api_client, policed):
    namespace, tenant = policed.namespace, policed.tenant
    tenant.create_namespaced_pod(namespace, manager(namespace, "changed"))
    try:
        # A container's image can be changed on a live pod: the kubelet would restart it so.
        image_change = [{"op": "replace", "path": "/spec/containers/0/image", "value": OTHER_IMAGE}]
        with pytest.raises(client.ApiException) as refused:
            tenant.patch_namespaced_pod("changed", namespace, image_change)
        assert_refused_by_the_policy(refused.value, "runs only the manager image")
        # `kubectl debug`: an ephemeral container in the manager's pod, refused even to one who
        # may add them (`edit` may not; the cluster's admin here).
        debug = {"spec": {"ephemeralContainers": [{"name": "debugger", "image": OTHER_IMAGE, "command": ["sh"]}]}}
        with pytest.raises(client.ApiException) as refused:
            client.CoreV1Api(api_client).patch_namespaced_pod_ephemeralcontainers("changed", namespace, debug)
        assert_refused_by_the_policy(refused.value, "runs the manager alone")
        # What the manager itself changes on its pod (its record) still goes through.
        tenant.patch_namespaced_pod("changed", namespace,
                                    {"metadata": {"annotations": {"distributetrain.io/phase": "x"}}})
    finally:
        tenant.delete_namespaced_pod("changed", namespace, grace_period_seconds=0)


def openshift_token_volume(namespace: str) -> dict:
    """manager.yaml with its token volume written as OpenShift's admission plugin writes it:
    the service CA besides."""
    pod = manager(namespace, "on-openshift")
    sources = [*standard_token_sources(), {"configMap": {"name": "openshift-service-ca.crt", "items": [
        {"key": "service-ca.crt", "path": "service-ca.crt"}]}}]
    mounted({"name": "kube-api-access-os", "projected": {"defaultMode": 420, "sources": sources}},
            {"readOnly": True})(pod["spec"])
    return pod


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
        "OpenShift's token volume": openshift_token_volume(namespace),
    }


def test_every_manager_users_apply_is_admitted(policed):
    for form, pod in every_form_of_the_manager(policed.namespace).items():
        pod = copy.deepcopy(pod)
        pod["metadata"]["namespace"] = policed.namespace
        try:
            policed.tenant.create_namespaced_pod(policed.namespace, pod, dry_run="All")
        except client.ApiException as e:
            raise AssertionError(f"{form} refused: {e.body}") from None


def test_a_manager_runs_its_job_under_the_policy(cluster, api_client, namespace, rbac, jobs, tmp_path):
    wait_until_active(as_tenant(api_client, namespace), namespace)
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("admitted", job_args(pool, claim, 2))
        assert jobs.exit_code("admitted", timeout_s=180) == 0, jobs.report("admitted")
        assert [name for name in jobs.pods() if name.startswith("admitted-")] == ["admitted-chief"]


def test_a_tenant_cannot_get_a_token_of_the_managers_serviceaccount(policed):
    tenant, namespace = policed.tenant, policed.namespace  # `edit` may request tokens and create Secrets
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
