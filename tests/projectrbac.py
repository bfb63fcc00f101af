"""The project's rbac/ (or one of its folders: rbac/kueue/) applied into a namespace, as a
cluster admin applies it for a team: for the tests' namespaces and the benchmarks'.

Every namespaced object and every binding's subject goes to the namespace, but the
placement Lease's grant, which goes to the Lease's namespace. Bindings outside
the namespace are named after it: many namespaces share the cluster-wide ones and the
Lease's namespace, and each removes its own; the admission policy's binding applies to the
namespace alone.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import client, utils

REPO = Path(__file__).resolve().parents[1]
LEASE_GRANT_FILES = "lease-role*.yaml"  # the placement Lease's Role and binding
DEFAULT_LEASE_NAMESPACE = "default"  # the manager's --lock-namespace default
POLICY = "ValidatingAdmissionPolicy"  # rbac/manager-admission-policy.yaml: one for the cluster
POLICY_BINDING = "ValidatingAdmissionPolicyBinding"  # one per namespace here


def rbac_documents(namespace: str, lease_namespace: str = DEFAULT_LEASE_NAMESPACE, folder: str = "rbac") -> list[dict]:
    """The documents of rbac/ (or `folder`) for ``namespace``, as the module says."""
    documents = []
    for path in sorted((REPO / folder).glob("*.yaml")):
        lease_grant = path.match(LEASE_GRANT_FILES)
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") == "Kustomization":
                continue
            if lease_grant:
                doc["metadata"]["namespace"] = lease_namespace
            elif doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
                doc["metadata"]["namespace"] = namespace
            if doc["kind"] == "ClusterRoleBinding" or (lease_grant and doc["kind"] == "RoleBinding"):
                doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"
            if doc["kind"] == POLICY_BINDING:
                doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"
                doc["spec"]["matchResources"]["namespaceSelector"] = {
                    "matchLabels": {"kubernetes.io/metadata.name": namespace}}
            for subject in doc.get("subjects", []):
                subject["namespace"] = namespace
            documents.append(doc)
    return documents


def apply_rbac(api_client, namespace: str, folder: str = "rbac") -> list[dict]:
    """Create them; the cluster-wide ones and the Lease's Role may exist already."""
    documents = rbac_documents(namespace, folder=folder)
    for doc in documents:
        try:
            utils.create_from_dict(api_client, doc)
        except utils.FailToCreateError as e:
            if not all(getattr(x, "status", None) == 409 for x in e.api_exceptions):
                raise
            # Shared by every namespace and left on the cluster: one from an older checkout must
            # not hold back rules added since (a patch replaces the whole list of rules).
            _update_shared(api_client, doc)
    return documents


def _update_shared(api_client, doc: dict) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    name = doc["metadata"]["name"]
    if doc["kind"] == "ClusterRole":
        rbac.patch_cluster_role(name, {"rules": doc["rules"]})
    elif doc["kind"] == "Role":
        rbac.patch_namespaced_role(name, doc["metadata"]["namespace"], {"rules": doc["rules"]})
    elif doc["kind"] == POLICY:
        # The whole spec: a merge patch would keep fields the file no longer has.
        client.AdmissionregistrationV1Api(api_client).patch_validating_admission_policy(
            name, [{"op": "replace", "path": "/spec", "value": doc["spec"]}])


def delete_shared_bindings(api_client, documents: list[dict]) -> None:
    """The namespace's bindings that its deletion would not take with it. The ClusterRole,
    the Lease's Role and the admission policy stay: every namespace applies the same ones."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    for doc in documents:
        try:
            if doc["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(doc["metadata"]["name"])
            elif doc["kind"] == POLICY_BINDING:
                client.AdmissionregistrationV1Api(api_client).delete_validating_admission_policy_binding(
                    doc["metadata"]["name"])
            elif doc["kind"] == "RoleBinding" and doc["metadata"]["namespace"] != doc["subjects"][0]["namespace"]:
                rbac.delete_namespaced_role_binding(doc["metadata"]["name"], doc["metadata"]["namespace"])
        except client.ApiException as e:
            if e.status != 404:
                raise
