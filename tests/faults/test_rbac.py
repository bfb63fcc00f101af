"""Least privilege: rbac/ is exactly enough, every rule is needed (the Events rule for
the job's story, every other one for the job itself), no wildcard, Secrets only in the
manager's namespace, and of the Leases in the shared Lease namespace only the placement
Lease can be read or changed."""

import contextlib
import copy
import uuid

import pytest
import yaml
from kubernetes import client, utils

from distributetrain.core.names import LOCK_LEASE_NAME
from distributetrain.core.settings import DEFAULT_LOCK_NAMESPACE
from localcluster import components, versions
from harness.polling import poll_until
from jobharness import REPO, SCRIPTS, Jobs, job_args, node_pool, script_volume, unbound_volume
from projectrbac import POLICY, POLICY_BINDING, rbac_documents

pytestmark = pytest.mark.cluster

# Events are best effort: without their rule the job still succeeds, and its log says
# they were refused, naming the permission.
# Rules the job runs without (resource, first verb, the one object named if any), and the
# line its log then says so with.
BEST_EFFORT_RULES = {("events", "create", None): "cannot record Events",
                     ("events", "list", None): "cannot follow the Events of its pods",
                     ("resourcequotas", "list", None): "ResourceQuotas are not checked",
                     # The survey managers starting together share: refused, each takes its own.
                     ("configmaps", "get", "distributetrain-cluster-view"): "cannot share the survey of the cluster",
                     ("configmaps", "create", None): "cannot share the survey of the cluster",
                     # The booking journal: refused, each holder of the Lease lists the bookings.
                     ("configmaps", "get", "distributetrain-booking-journal"): "cannot read the booking journal",
                     # Where the release serves PodGroups (RELEASE_RULES): the job's pods are then no gang.
                     ("podgroups", "create", None): "the job's pods are no gang"}
SHARED_KINDS = {POLICY, "ConfigMap"}
RBAC_SEEN_S = 30
# Rules only a flag's job uses (resource, first verb, None): the flag whose job is run without
# the rule, the cluster-scoped object it names (made by the test), and the line its log
# says then for a best-effort rule (None: the job fails, 77).
RUNTIME_CLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": "runc"}
DEVICE_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "spec": {}}
FLAG_RULES = {("runtimeclasses", "get", None): ("--runtime-class", RUNTIME_CLASS, "cannot read RuntimeClass"),
              ("deviceclasses", "get", None): ("--device-class", DEVICE_CLASS, None),
              ("resourceslices", "list", None): ("--device-class", DEVICE_CLASS, None),
              ("resourceclaimtemplates", "create", None): ("--device-class", DEVICE_CLASS, None)}


# Rules only a release that serves their API uses (resource): on the others the manager never
# asks for them, so a job without them is no proof. PodGroups: from 1.37 (localcluster's
# components.gang_scheduling); there the job runs without the rule, its pods no gang.
RELEASE_RULES = {"podgroups": components.gang_scheduling}


def all_rules(release_serves: bool = False):
    """(kind, name, index, rule) of every rule in rbac/; with ``release_serves``, those of
    RELEASE_RULES only where the cluster's release (DT_KUBERNETES_VERSION) serves their API."""
    found = []
    for path in sorted((REPO / "rbac").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in ("Role", "ClusterRole"):
                found.extend((doc["kind"], doc["metadata"]["name"], i, rule) for i, rule in enumerate(doc["rules"])
                             if not release_serves or _used_by_the_release(rule))
    return found


def _used_by_the_release(rule: dict) -> bool:
    serves = RELEASE_RULES.get(rule["resources"][0])
    return serves is None or serves(versions.selected())


def test_no_wildcards_and_nothing_cluster_wide_writes():
    for kind, _, _, rule in all_rules():
        assert "*" not in str(rule), rule
        if kind == "ClusterRole":
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
            assert "secrets" not in rule["resources"], rule


def apply_without(api_client, namespace, kind, name, index) -> tuple[list[dict], str]:
    """rbac/ for ``namespace`` with one rule removed; cluster-scoped names made unique.

    The Lease's grant goes to the test's own namespace too (the job is run with
    ``--lock-namespace`` there): the shared one must stay whole for concurrent tests,
    and only a Lease namespace where the Lease does not exist yet needs its create."""
    suffix = uuid.uuid4().hex[:6]
    documents = copy.deepcopy(rbac_documents(namespace, lease_namespace=namespace))
    for doc in documents:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            removed = doc["rules"].pop(index)
        if doc["kind"] == "ClusterRole":
            doc["metadata"]["name"] += f"-{suffix}"
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += f"-{suffix}"
    for doc in documents:
        try:
            utils.create_from_dict(api_client, doc)
        except utils.FailToCreateError as e:
            # The manager's admission policy and its images are one for the cluster.
            if doc["kind"] not in SHARED_KINDS or not all(x.status == 409 for x in e.api_exceptions):
                raise
    return documents, f"{removed['verbs']} {removed['resources']}"


@contextlib.contextmanager
def cluster_object(api_client, obj, prefix):
    """A RuntimeClass or DeviceClass of its own for a flag's job (None: nothing); its name."""
    if obj is None:
        yield None
        return
    name = f"rbac-{prefix}"
    group, version = obj["apiVersion"].split("/")
    plural = obj["kind"].lower() + "es"
    custom = client.CustomObjectsApi(api_client)
    custom.create_cluster_custom_object(group, version, plural, {**obj, "metadata": {"name": name}})
    try:
        yield name
    finally:
        custom.delete_cluster_custom_object(group, version, plural, name)


def delete_cluster_objects(api_client, documents):
    rbac = client.RbacAuthorizationV1Api(api_client)
    for doc in documents:
        if doc["kind"] == "ClusterRole":
            rbac.delete_cluster_role(doc["metadata"]["name"])
        elif doc["kind"] == "ClusterRoleBinding":
            rbac.delete_cluster_role_binding(doc["metadata"]["name"])
        elif doc["kind"] == POLICY_BINDING:
            client.AdmissionregistrationV1Api(api_client).delete_validating_admission_policy_binding(
                doc["metadata"]["name"])


@pytest.mark.parametrize("kind,name,index,rule", all_rules(release_serves=True),
                         ids=lambda v: str(v) if not isinstance(v, dict) else "-".join(v["resources"] + v["verbs"]))
def test_every_rule_is_needed(cluster, api_client, namespace, tmp_path, kind, name, index, rule):
    documents, removed = apply_without(api_client, namespace, kind, name, index)
    jobs = Jobs(api_client, namespace)
    resource = rule["resources"][0]
    key = (resource, rule["verbs"][0], (rule.get("resourceNames") or [None])[0])
    flag, named, says = FLAG_RULES.get(key, (None, None, None))
    best_effort = BEST_EFFORT_RULES.get(key) or says
    try:
        # Besides the script's claim (bound: its PersistentVolume is read), one not bound
        # yet (its StorageClass is read), which the scheduler binds for the first pod.
        with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
                script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim, \
                unbound_volume(api_client, namespace, "scratch", tmp_path / "scratch") as scratch, \
                cluster_object(api_client, named, pool.prefix) as named_name:
            extra = [f"{flag}={named_name}"] if flag else []
            jobs.submit("rbac", job_args(pool, claim, 2, f"--lock-namespace={namespace}",
                                         f"--pvc={scratch}:/scratch", *extra))
            code = jobs.exit_code("rbac", timeout_s=120)
            log = jobs.logs("rbac")
            if best_effort:
                assert code == 0, (removed, log)
                assert best_effort in log and f'resource "{resource}"' in log, (removed, log)
                return
            assert code == 77, (removed, log)
            assert f'resource "{resource}"' in log and "cannot" in log, (removed, log)
            assert [n for n in jobs.pods() if n.startswith("rbac-")] == []
    finally:
        delete_cluster_objects(api_client, documents)


def test_secrets_only_in_the_managers_namespace(api_client, namespace, rbac):
    review = client.AuthorizationV1Api(api_client)
    user = f"system:serviceaccount:{namespace}:distributetrain-manager"

    def allowed(verb, ns):
        spec = {"user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                "resourceAttributes": {"verb": verb, "resource": "secrets", "namespace": ns}}
        return review.create_subject_access_review({"apiVersion": "authorization.k8s.io/v1",
                                                    "kind": "SubjectAccessReview", "spec": spec}).status.allowed

    # The API server authorizes from its cache of Roles and bindings, which follows the
    # writes of the ``rbac`` fixture a moment later.
    poll_until(lambda: allowed("create", namespace) and allowed("get", namespace), RBAC_SEEN_S,
               "the manager's Role in the API server's authorizer")
    for verb in ("create", "get", "list", "delete"):
        assert not allowed(verb, "kube-system") and not allowed(verb, "default")
    assert not allowed("list", namespace)  # not even all of its own namespace's Secrets


def test_teardown_may_delete_the_jobs_pods_by_collection_and_quotas_be_watched_in_its_namespace_only(
        api_client, namespace, rbac):
    """Teardown's one deletecollection and the wait on a full ResourceQuota: granted in the
    job's namespace (without them the manager falls back, see docs/rbac.md), nowhere else."""
    review = client.AuthorizationV1Api(api_client)
    user = f"system:serviceaccount:{namespace}:distributetrain-manager"

    def allowed(verb, resource, ns):
        spec = {"user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                "resourceAttributes": {"verb": verb, "resource": resource, "namespace": ns}}
        return review.create_subject_access_review({"apiVersion": "authorization.k8s.io/v1",
                                                    "kind": "SubjectAccessReview", "spec": spec}).status.allowed

    for verb, resource in (("deletecollection", "pods"), ("list", "resourcequotas"), ("watch", "resourcequotas")):
        assert allowed(verb, resource, namespace), (verb, resource)
        assert not allowed(verb, resource, "kube-system") and not allowed(verb, resource, "default"), (verb, resource)
    assert not allowed("deletecollection", "secrets", namespace)  # its one Secret goes by name


def test_of_the_leases_only_the_placement_lease(api_client, namespace, rbac):
    review = client.AuthorizationV1Api(api_client)
    user = f"system:serviceaccount:{namespace}:distributetrain-manager"

    def allowed(verb, ns, name=""):
        spec = {"user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                "resourceAttributes": {"verb": verb, "group": "coordination.k8s.io", "resource": "leases",
                                       "namespace": ns, "name": name}}
        return review.create_subject_access_review({"apiVersion": "authorization.k8s.io/v1",
                                                    "kind": "SubjectAccessReview", "spec": spec}).status.allowed

    for verb in ("get", "update", "watch"):  # watch: a busy Lease is taken at its release
        assert allowed(verb, DEFAULT_LOCK_NAMESPACE, LOCK_LEASE_NAME)
        assert not allowed(verb, DEFAULT_LOCK_NAMESPACE, "another-lease")
        assert not allowed(verb, namespace, LOCK_LEASE_NAME)  # nor in the job's own namespace
        assert not allowed(verb, "kube-node-lease", "some-node")
    assert allowed("create", DEFAULT_LOCK_NAMESPACE)  # RBAC cannot limit create by name
    for verb in ("list", "delete", "patch"):
        assert not allowed(verb, DEFAULT_LOCK_NAMESPACE, LOCK_LEASE_NAME)
    assert not allowed("watch", DEFAULT_LOCK_NAMESPACE)  # every Lease of the namespace

    # And an attempt, as the manager's ServiceAccount: another Lease in the Lease namespace
    # cannot be changed.
    as_manager = client.ApiClient(api_client.configuration, header_name="Impersonate-User", header_value=user)
    other = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": f"not-placement-{namespace}"[:63], "namespace": DEFAULT_LOCK_NAMESPACE},
             "spec": {"holderIdentity": "intruder"}}
    with pytest.raises(client.ApiException) as refused:
        client.CoordinationV1Api(as_manager).replace_namespaced_lease(
            other["metadata"]["name"], DEFAULT_LOCK_NAMESPACE, other)
    assert refused.value.status == 403, refused.value
