"""OpenShift-like namespaces: each assigns its pods a UID of its own range and refuses any
other, as OpenShift's default security context constraint, `restricted-v2`, does.

What OpenShift does, from its own sources:
- Every project is annotated with the IDs its pods may use (``openshift.io/sa.scc.uid-range``,
  ``openshift.io/sa.scc.supplemental-groups``, "1000680000/10000": the first and how many)
  and an SELinux level (``openshift.io/sa.scc.mcs``). The SCC admission looks them up for
  a pod: a MustRunAsRange ``runAsUser`` strategy defaults a pod that names no UID to the
  first of the range and refuses a UID outside it; a MustRunAs ``fsGroup`` strategy does
  the same with the supplemental groups ("About pre-allocated security context constraints
  values", OpenShift Container Platform docs, Authentication and authorization).
- restricted-v2 itself (openshift/cluster-kube-apiserver-operator,
  bindata/bootkube/scc-manifests/0000_20_kube-apiserver-operator_00_scc-restricted-v2.yaml):
  runAsUser MustRunAsRange, fsGroup MustRunAs, seLinuxContext MustRunAs, supplementalGroups
  RunAsAny; requiredDropCapabilities ALL, allowedCapabilities NET_BIND_SERVICE only;
  allowPrivilegeEscalation false, no privileged container; no host network, PID, IPC or
  ports; seccomp runtime/default, defaulted where unset; volumes configMap, csi,
  downwardAPI, emptyDir, ephemeral, image, persistentVolumeClaim, projected, secret;
  readOnlyRootFilesystem not required. runAsGroup is not checked (OpenShift does not yet).
- PodSecurity: enforced `privileged` cluster-wide, a namespace labelled `restricted` for
  warnings and audits by the label syncer ("Understanding and managing pod security
  admission").

Here the local cluster's own admission does it: a MutatingAdmissionPolicy (beta in
Kubernetes 1.34, enabled by the apiserver's flags, ``components``) fills in what the SCC
fills in, and a ValidatingAdmissionPolicy refuses what it refuses, with its words
("unable to validate against any security context constraint") and its status (403).
Both apply to namespaces labelled ``PLATFORM_LABEL`` (``make_openshift_like``). Not
emulated: SCCs other than restricted-v2 and their choice by the pod's ServiceAccount,
SELinux itself (the nodes have none; the level is set as OpenShift sets it), and a
container's own UID where the pod names one (OpenShift sets each container's; here the
pod's, which the containers inherit).
"""

from __future__ import annotations

import hashlib
import json

import yaml

from localcluster.probe import wait_until

PLATFORM_LABEL = "localcluster.distributetrain.io/platform"
PLATFORM = "openshift"
UID_RANGE_ANNOTATION = "openshift.io/sa.scc.uid-range"
SUPPLEMENTAL_GROUPS_ANNOTATION = "openshift.io/sa.scc.supplemental-groups"
MCS_ANNOTATION = "openshift.io/sa.scc.mcs"
# A project's as OpenShift allocates them (blocks of 10,000 from 1000000000).
FIRST_UID = 1000680000
RANGE_SIZE = 10000
MCS_LEVEL = "s0:c26,c15"
# The admission's objects are named after a digest of what they do, so a cluster that
# holds an earlier version (a long-lived local cluster) is seen to enforce this one: the
# apiserver names the refusing policy in its answer.
POLICY_PREFIX = "localcluster-openshift-restricted-v2"
ADMISSION_LABEL = "localcluster.distributetrain.io/admission"  # on each of its objects: whose they are
REFUSAL = "unable to validate against any security context constraint"
ALLOWED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim",
                   "projected", "secret")
CONTAINER_LISTS = ("containers", "initContainers")
ACTIVE_TIMEOUT_S = 30.0

_ANNOTATIONS = "namespaceObject.metadata.annotations"
# IDs from the namespace's annotations, "FIRST/COUNT" (the supplemental groups may list
# several ranges: the first is the default, as OpenShift takes it).
VARIABLES = [
    {"name": "uids", "expression": f"{_ANNOTATIONS}['{UID_RANGE_ANNOTATION}'].split('/')"},
    {"name": "uidMin", "expression": "int(variables.uids[0])"},
    {"name": "uidMax", "expression": "variables.uidMin + int(variables.uids[1]) - 1"},
    {"name": "groups", "expression": f"{_ANNOTATIONS}['{SUPPLEMENTAL_GROUPS_ANNOTATION}'].split(',')[0].split('/')"},
    {"name": "groupMin", "expression": "int(variables.groups[0])"},
    {"name": "groupMax", "expression": "variables.groupMin + int(variables.groups[1]) - 1"},
    {"name": "mcs", "expression": f"{_ANNOTATIONS}['{MCS_ANNOTATION}']"},
]
_POD_CONTEXT = "object.spec.securityContext"


def _patch(op_path: str, value: str) -> str:
    return f'JSONPatch{{op: "add", path: {op_path}, value: {value}}}'


def _unset(field: str) -> str:
    return f"(!has({_POD_CONTEXT}) || !has({_POD_CONTEXT}.{field}))"


def _pod_mutation() -> str:
    """What the SCC fills in at the pod's level: the UID, fsGroup, SELinux level, seccomp."""
    context = "Object.spec.securityContext"
    defaults = [
        ("runAsUser", "variables.uidMin"),
        ("fsGroup", "variables.groupMin"),
        ("seLinuxOptions", f"{context}.seLinuxOptions{{level: variables.mcs}}"),
        ("seccompProfile", f'{context}.seccompProfile{{type: "RuntimeDefault"}}'),
    ]
    parts = [f"(has({_POD_CONTEXT}) ? [] : [{_patch(repr('/spec/securityContext'), context + '{}')}])"]
    parts += [f"({_unset(field)} ? [{_patch(repr('/spec/securityContext/' + field), value)}] : [])"
              for field, value in defaults]
    return " + ".join(parts)


def _container_mutations(containers: str) -> list[str]:
    """Per container of ``containers``, in order (each sees the one before): a security
    context, allowPrivilegeEscalation false, ALL among its dropped capabilities."""
    listed = f"object.spec.{containers}"
    context = f"'/spec/{containers}/' + string(i) + '/securityContext'"
    kind = f"Object.spec.{containers}.securityContext"
    each = f"!has({listed}) ? [] : {listed}.transformList(i, c, "
    capabilities = "c.securityContext.capabilities"
    drops_all = f"has({capabilities}) && has({capabilities}.drop) && 'ALL' in {capabilities}.drop"
    add_capabilities = _patch(context + " + '/capabilities'", kind + ".capabilities{drop: ['ALL']}")
    add_drop = _patch(context + " + '/capabilities/drop'", "['ALL']")
    append_all = _patch(context + " + '/capabilities/drop/-'", "'ALL'")
    no_escalation = _patch(context + " + '/allowPrivilegeEscalation'", "false")
    return [
        each + f"!has(c.securityContext), {_patch(context, kind + '{}')})",
        each + f"!has(c.securityContext.allowPrivilegeEscalation), {no_escalation})",
        each + f"!({drops_all}), !has({capabilities}) ? {add_capabilities} "
               f": !has({capabilities}.drop) ? {add_drop} : {append_all})",
    ]


def _every_container(condition: str) -> str:
    return " && ".join(f"(!has(object.spec.{c}) || object.spec.{c}.all(c, {condition}))" for c in CONTAINER_LISTS)


def _refusal(field: str, detail: str) -> str:
    return (f"'{REFUSAL}: [provider \"restricted-v2\": {field}: ' + {detail} + ']'")


def _asked_uids() -> str:
    """Every UID the pod names: its own and its containers'."""
    containers = " + ".join(
        f"(has(object.spec.{c}) ? object.spec.{c}.filter(c, has(c.securityContext) && has(c.securityContext.runAsUser))"
        f".map(c, c.securityContext.runAsUser) : [])" for c in CONTAINER_LISTS)
    return f"({_unset('runAsUser')} ? [] : [{_POD_CONTEXT}.runAsUser]) + {containers}"


# The validations' own: the UIDs the pod names outside the namespace's range.
VALIDATION_VARIABLES = [
    {"name": "uidsOutside",
     "expression": f"({_asked_uids()}).filter(u, u < variables.uidMin || u > variables.uidMax)"},
]


def _validations() -> list[dict]:
    ranges = "'must be in the ranges: [' + string(variables.uidMin) + ', ' + string(variables.uidMax) + ']'"
    group_ranges = ("'must be in the ranges: [' + string(variables.groupMin) + ', ' + string(variables.groupMax)"
                    " + ']'")
    return [
        {"expression": "variables.uidsOutside.size() == 0",
         "messageExpression": _refusal(".spec.securityContext.runAsUser",
                                       f"'Invalid value: ' + string(variables.uidsOutside[0]) + ': ' + {ranges}")},
        {"expression": f"{_unset('fsGroup')} || ({_POD_CONTEXT}.fsGroup >= variables.groupMin "
                       f"&& {_POD_CONTEXT}.fsGroup <= variables.groupMax)",
         "messageExpression": _refusal(".spec.securityContext.fsGroup",
                                       f"'Invalid value: ' + string({_POD_CONTEXT}.fsGroup) + ': ' + {group_ranges}")},
        {"expression": _every_container(
            "!has(c.securityContext) || ((!has(c.securityContext.privileged) || !c.securityContext.privileged) "
            "&& (!has(c.securityContext.allowPrivilegeEscalation) || !c.securityContext.allowPrivilegeEscalation) "
            "&& (!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) "
            "|| c.securityContext.capabilities.add.all(a, a == 'NET_BIND_SERVICE')))"),
         "messageExpression": _refusal(".containers[*].securityContext",
                                       "'privileged, privilege escalation or capabilities other than "
                                       "NET_BIND_SERVICE are not allowed'")},
        {"expression": "!(has(object.spec.hostNetwork) && object.spec.hostNetwork) "
                       "&& !(has(object.spec.hostPID) && object.spec.hostPID) "
                       "&& !(has(object.spec.hostIPC) && object.spec.hostIPC) && "
                       + _every_container("!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)"),
         "messageExpression": _refusal(".spec", "'Host network, PID, IPC and ports are not allowed to be used'")},
        {"expression": "!has(object.spec.volumes) || object.spec.volumes.all(v, "
                       + " || ".join(f"has(v.{kind})" for kind in ALLOWED_VOLUMES) + ")",
         "messageExpression": _refusal(".spec.volumes", f"'only {', '.join(ALLOWED_VOLUMES)} volumes are allowed'")},
        {"expression": f"({_unset('seccompProfile')} || {_POD_CONTEXT}.seccompProfile.type == 'RuntimeDefault') && "
                       + _every_container("!has(c.securityContext) || !has(c.securityContext.seccompProfile) "
                                          "|| c.securityContext.seccompProfile.type == 'RuntimeDefault'"),
         "messageExpression": _refusal(".spec.securityContext.seccompProfile", "'only runtime/default is allowed'")},
    ]


def _match() -> dict:
    return {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                               "resources": ["pods"]}]}


def _namespaces() -> dict:
    return {"namespaceSelector": {"matchLabels": {PLATFORM_LABEL: PLATFORM}}}


def _specs() -> list[tuple[str, str, dict]]:
    """(apiVersion, kind, spec without the policy's name) of each object of the admission."""
    mutations = [_pod_mutation(), *(m for lists in CONTAINER_LISTS for m in _container_mutations(lists))]
    return [
        ("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicy",
         {"failurePolicy": "Fail", "reinvocationPolicy": "Never", "matchConstraints": _match(), "variables": VARIABLES,
          "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": m}} for m in mutations]}),
        ("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicyBinding", {"matchResources": _namespaces()}),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy",
         {"failurePolicy": "Fail", "matchConstraints": _match(), "variables": VARIABLES + VALIDATION_VARIABLES,
          "validations": [{**v, "reason": "Forbidden"} for v in _validations()]}),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding",
         {"validationActions": ["Deny"], "matchResources": _namespaces()}),
    ]


def policy_name() -> str:
    digest = hashlib.sha256(json.dumps(_specs(), sort_keys=True).encode()).hexdigest()[:10]
    return f"{POLICY_PREFIX}-{digest}"


def admission_objects() -> list[dict]:
    """restricted-v2 as the local cluster's own admission: the policies and their bindings."""
    name = policy_name()
    metadata = {"name": name, "labels": {ADMISSION_LABEL: "openshift"}}
    return [{"apiVersion": version, "kind": kind, "metadata": metadata,
             "spec": {**({"policyName": name} if kind.endswith("Binding") else {}), **spec}}
            for version, kind, spec in _specs()]


def namespace_metadata(first_uid: int = FIRST_UID, size: int = RANGE_SIZE, mcs: str = MCS_LEVEL) -> dict:
    """What OpenShift puts on a project: its ID ranges and SELinux level, and PodSecurity
    `restricted` for warnings and audits; and the label that applies the admission here."""
    ids = f"{first_uid}/{size}"
    return {
        "labels": {PLATFORM_LABEL: PLATFORM, "pod-security.kubernetes.io/audit": "restricted",
                   "pod-security.kubernetes.io/warn": "restricted"},
        "annotations": {UID_RANGE_ANNOTATION: ids, SUPPLEMENTAL_GROUPS_ANNOTATION: ids, MCS_ANNOTATION: mcs},
    }


def probe_pod(image: str, security_context: dict | None = None) -> dict:
    """A pod naming no UID (OpenShift-like admission gives it the namespace's first), or
    with ``security_context``."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "openshift-admission-probe"},
            "spec": {"containers": [{"name": "probe", "image": image}],
                     **({"securityContext": security_context} if security_context else {})}}


def make_openshift_like(cluster, namespace: str, image: str, first_uid: int = FIRST_UID) -> None:
    """Make ``namespace`` (existing) OpenShift-like: the admission installed (once per
    cluster, an earlier version of it removed; the apiserver must serve
    MutatingAdmissionPolicy, as ``components`` starts it), the namespace annotated and
    labelled; returns once the apiserver enforces this version of both policies there: a
    pod created there (a dry run) is given its UID, and one naming UID 1 is refused."""
    from kubernetes import client

    applied = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                              input=yaml.safe_dump_all(admission_objects()))
    if applied.returncode != 0:
        raise RuntimeError(f"installing the OpenShift-like admission failed (an apiserver started without "
                           f"MutatingAdmissionPolicy: `localcluster down` and up again): {applied.stderr.strip()}")
    kinds = ",".join(o["kind"] for o in admission_objects())
    names = cluster.kubectl("get", kinds, "-o", "name", check=True).stdout.split()
    stale = [n for n in names if n.split("/", 1)[1].startswith(POLICY_PREFIX) and not n.endswith(f"/{policy_name()}")]
    if stale:
        cluster.kubectl("delete", *stale, check=True)
    core = client.CoreV1Api(cluster.api_client())
    core.patch_namespace(namespace, {"metadata": namespace_metadata(first_uid)})

    def enforced() -> bool:
        try:
            plain = core.create_namespaced_pod(namespace, probe_pod(image), dry_run="All")
        except client.ApiException as refused:
            if refused.status != 503:  # the mutating policy's types not loaded yet: it fails closed
                raise
            return False
        if plain.spec.security_context.run_as_user != first_uid:
            return False
        try:
            core.create_namespaced_pod(namespace, probe_pod(image, {"runAsUser": 1}), dry_run="All")
        except client.ApiException as refused:
            if refused.status != 403:
                raise
            return f"'{policy_name()}'" in (refused.body or "")
        return False

    wait_until(enforced, ACTIVE_TIMEOUT_S, f"OpenShift-like admission in namespace {namespace}")
