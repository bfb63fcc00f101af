"""Least privilege: rbac/ is exactly enough, every rule is needed (the Events rule for
the job's story, every other one for the job itself), no wildcard, Secrets only in the
manager's namespace."""

import copy
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client, utils

from jobharness import REPO, SCRIPTS, Jobs, job_args, node_pool, rbac_documents, script_volume

pytestmark = pytest.mark.cluster

# Events are best effort: without their rule the job still succeeds, and its log says
# they were refused, naming the permission.
BEST_EFFORT_RESOURCES = {"events"}


def all_rules():
    """(kind, index, rule) of every rule in rbac/."""
    found = []
    for path in sorted((REPO / "rbac").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in ("Role", "ClusterRole"):
                found.extend((doc["kind"], i, rule) for i, rule in enumerate(doc["rules"]))
    return found


def test_no_wildcards_and_nothing_cluster_wide_writes():
    for kind, _, rule in all_rules():
        assert "*" not in str(rule), rule
        if kind == "ClusterRole":
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
            assert "secrets" not in rule["resources"], rule


def apply_without(api_client, namespace, kind, index) -> tuple[list[dict], str]:
    """rbac/ for ``namespace`` with one rule removed; cluster-scoped names made unique."""
    suffix = uuid.uuid4().hex[:6]
    documents = copy.deepcopy(rbac_documents(namespace))
    for doc in documents:
        if doc["kind"] == "ClusterRole":
            doc["metadata"]["name"] += f"-{suffix}"
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += f"-{suffix}"
        if doc["kind"] == kind:
            removed = doc["rules"].pop(index)
    for doc in documents:
        utils.create_from_dict(api_client, doc)
    return documents, f"{removed['verbs']} {removed['resources']}"


def delete_cluster_objects(api_client, documents):
    rbac = client.RbacAuthorizationV1Api(api_client)
    for doc in documents:
        if doc["kind"] == "ClusterRole":
            rbac.delete_cluster_role(doc["metadata"]["name"])
        elif doc["kind"] == "ClusterRoleBinding":
            rbac.delete_cluster_role_binding(doc["metadata"]["name"])


@pytest.mark.parametrize("kind,index,rule", all_rules(), ids=lambda v: str(v) if not isinstance(v, dict) else
                         "-".join(v["resources"]))
def test_every_rule_is_needed(cluster, api_client, namespace, tmp_path, kind, index, rule):
    documents, removed = apply_without(api_client, namespace, kind, index)
    jobs = Jobs(api_client, namespace)
    try:
        with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
                script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
            jobs.submit("rbac", job_args(pool, claim, 2))
            code = jobs.exit_code("rbac", timeout_s=120)
            log = jobs.logs("rbac")
            resource = rule["resources"][0]
            if resource in BEST_EFFORT_RESOURCES:
                assert code == 0, (removed, log)
                assert "cannot record Events" in log and f'resource "{resource}"' in log, (removed, log)
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

    assert allowed("create", namespace) and allowed("get", namespace)
    for verb in ("create", "get", "list", "delete"):
        assert not allowed(verb, "kube-system") and not allowed(verb, "default")
    assert not allowed("list", namespace)  # not even all of its own namespace's Secrets
