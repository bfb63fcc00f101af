"""The OpenShift-like namespaces' objects: what OpenShift puts on a project, and restricted-v2
as the local cluster's own admission (tests/platforms/test_openshift.py runs it)."""

from localcluster import openshift

# restricted-v2's volumes (openshift/cluster-kube-apiserver-operator, bindata/bootkube/
# scc-manifests/0000_20_kube-apiserver-operator_00_scc-restricted-v2.yaml).
RESTRICTED_V2_VOLUMES = ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim",
                         "projected", "secret"]
PODS_CREATED = {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                   "resources": ["pods"]}]}
OPENSHIFT_LIKE = {"namespaceSelector": {"matchLabels": {"localcluster.distributetrain.io/platform": "openshift"}}}


def test_a_namespace_is_annotated_as_openshift_annotates_a_project():
    assert openshift.namespace_metadata() == {
        "labels": {"localcluster.distributetrain.io/platform": "openshift",
                   "pod-security.kubernetes.io/audit": "restricted", "pod-security.kubernetes.io/warn": "restricted"},
        "annotations": {"openshift.io/sa.scc.uid-range": "1000680000/10000",
                        "openshift.io/sa.scc.supplemental-groups": "1000680000/10000",
                        "openshift.io/sa.scc.mcs": "s0:c26,c15"},
    }
    other = openshift.namespace_metadata(1000700000)["annotations"]
    assert other["openshift.io/sa.scc.uid-range"] == "1000700000/10000"


def test_the_admission_applies_to_openshift_like_namespaces_alone_and_fails_closed():
    mutating, mutating_binding, validating, validating_binding = openshift.admission_objects()
    assert [o["kind"] for o in openshift.admission_objects()] == [
        "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding"]
    for policy in (mutating, validating):
        assert policy["spec"]["matchConstraints"] == PODS_CREATED and policy["spec"]["failurePolicy"] == "Fail"
    name = openshift.policy_name()
    assert name.startswith("localcluster-openshift-restricted-v2-")
    assert {o["metadata"]["name"] for o in openshift.admission_objects()} == {name}
    assert all(o["metadata"]["labels"] == {"localcluster.distributetrain.io/admission": "openshift"}
               for o in openshift.admission_objects())
    assert mutating_binding["spec"] == {"policyName": name, "matchResources": OPENSHIFT_LIKE}
    assert validating_binding["spec"] == {"policyName": name, "validationActions": ["Deny"],
                                          "matchResources": OPENSHIFT_LIKE}


def test_the_mutations_fill_in_what_restricted_v2_fills_in_pod_first():
    mutations = [m["jsonPatch"]["expression"] for m in openshift.admission_objects()[0]["spec"]["mutations"]]
    assert all(m["patchType"] == "JSONPatch" for m in openshift.admission_objects()[0]["spec"]["mutations"])
    pod, *containers = mutations
    for field, value in (("runAsUser", "variables.uidMin"), ("fsGroup", "variables.groupMin"),
                         ("seLinuxOptions", "level: variables.mcs"), ("seccompProfile", 'type: "RuntimeDefault"')):
        assert f"path: '/spec/securityContext/{field}'" in pod and value in pod
    assert len(containers) == 6  # three steps for each of containers and initContainers
    for steps, kind in ((containers[:3], "containers"), (containers[3:], "initContainers")):
        assert all(f"object.spec.{kind}.transformList" in step for step in steps)
        assert "/allowPrivilegeEscalation', value: false" in steps[1] and "drop: ['ALL']" in steps[2]


def test_the_validations_refuse_in_openshifts_words_with_its_status():
    validations = openshift.admission_objects()[2]["spec"]["validations"]
    assert all(v["reason"] == "Forbidden" for v in validations)
    assert all(v["messageExpression"].startswith("'unable to validate against any security context constraint: "
                                                 "[provider \"restricted-v2\": ") for v in validations)
    uids, groups, privileges, host, volumes, seccomp = (v["expression"] for v in validations)
    assert uids == "variables.uidsOutside.size() == 0"
    outside = openshift.admission_objects()[2]["spec"]["variables"][-1]
    assert outside["name"] == "uidsOutside" and "object.spec.initContainers" in outside["expression"]
    assert outside["expression"].endswith(".filter(u, u < variables.uidMin || u > variables.uidMax)")
    assert "variables.groupMin" in groups and "variables.groupMax" in groups
    assert "NET_BIND_SERVICE" in privileges and "allowPrivilegeEscalation" in privileges
    assert all(f"object.spec.{field}" in host for field in ("hostNetwork", "hostPID", "hostIPC")) and "hostPort" in host
    assert sorted(openshift.ALLOWED_VOLUMES) == sorted(RESTRICTED_V2_VOLUMES)
    assert all(f"has(v.{kind})" in volumes for kind in RESTRICTED_V2_VOLUMES) and "hostPath" not in volumes
    assert "'RuntimeDefault'" in seccomp


def test_ids_come_from_the_namespaces_annotations():
    variables = {v["name"]: v["expression"] for v in openshift.VARIABLES}
    assert variables["uids"] == "namespaceObject.metadata.annotations['openshift.io/sa.scc.uid-range'].split('/')"
    assert variables["uidMax"] == "variables.uidMin + int(variables.uids[1]) - 1"
    assert variables["groups"].startswith(
        "namespaceObject.metadata.annotations['openshift.io/sa.scc.supplemental-groups']")
