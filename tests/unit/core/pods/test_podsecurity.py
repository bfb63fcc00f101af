"""Who job pods run as: --run-as-user and --run-as-group, ``auto`` decided by the namespace,
and the security contexts, whole."""

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from distributetrain.cli import jobflags, main as cli
from distributetrain.core import errors
from distributetrain.core.job import jobspec
from distributetrain.core.pods import manifests, podsecurity
from distributetrain.core.settings import JobSettings

SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="img:1")
OPENSHIFT = {"annotations": {podsecurity.OPENSHIFT_UID_RANGE_ANNOTATION: "1000680000/10000",
                             "openshift.io/sa.scc.supplemental-groups": "1000680000/10000"}}
RESTRICTED = {"seccompProfile": {"type": "RuntimeDefault"}}


@pytest.mark.parametrize("asked,group,pod", [
    ("auto", None, {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, **RESTRICTED}),
    (2000, None, {"runAsNonRoot": True, "runAsUser": 2000, "runAsGroup": 2000, "fsGroup": 2000, **RESTRICTED}),
    (2000, 0, {"runAsNonRoot": True, "runAsUser": 2000, "runAsGroup": 0, "fsGroup": 0, **RESTRICTED}),
    ("platform", None, {"runAsNonRoot": True, **RESTRICTED}),
    ("platform", 3000, {"runAsNonRoot": True, "runAsGroup": 3000, "fsGroup": 3000, **RESTRICTED}),
], ids=["default", "a-volume-owner", "its-group", "assigned", "assigned-user-own-group"])
def test_job_pods_security_context_whole(asked, group, pod):
    settings = SETTINGS.replace(run_as_user=asked, run_as_group=group)
    for built in (manifests.worker_pod(settings, 0, "a", 1), manifests.chief_pod(settings, "b", 1)):
        assert built["spec"]["securityContext"] == pod
        assert built["spec"]["containers"][0]["securityContext"] == {
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.mark.parametrize("asked,namespace,decided", [
    ("auto", OPENSHIFT, "platform"),
    ("auto", {"annotations": {}}, "auto"),
    ("auto", {}, "auto"),
    ("auto", None, "auto"),  # no namespace: pre-flight says so
    (1000680003, OPENSHIFT, 1000680003),  # the user's choice stands (the platform may refuse it)
    ("platform", {}, "platform"),
])
def test_auto_is_the_platforms_uid_where_the_namespace_says_it_assigns_uids(asked, namespace, decided):
    assert podsecurity.for_namespace(SETTINGS.replace(run_as_user=asked), namespace).run_as_user == decided


@pytest.mark.parametrize("argv,read_only", [((), False), (("--read-only-root-filesystem",), True),
                                             (("--read-only-root-filesystem=false",), False)])
def test_job_pods_root_filesystem_is_read_only_when_asked(argv, read_only):
    settings = parsed(*argv)
    for built in (manifests.worker_pod(settings, 0, "a", 1), manifests.chief_pod(settings, "b", 1)):
        assert built["spec"]["containers"][0]["securityContext"] == {
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            **({"readOnlyRootFilesystem": True} if read_only else {})}
        assert {"name": "tmp", "mountPath": "/tmp"} in built["spec"]["containers"][0]["volumeMounts"]


def test_the_manager_names_no_uid_and_writes_nothing():
    assert podsecurity.pod_security_context() == {"runAsNonRoot": True, **RESTRICTED}
    assert podsecurity.container_security_context(read_only_root=True) == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}


def parsed(*argv: str) -> JobSettings:
    args = cli.build_parser().parse_args(["pre-training", "--num-gpus=1", "--image=img:1", "--job-name=demo",
                                          "--namespace=ml", *argv])
    return jobflags.settings_from_args(args, ())


@hypothesis_settings(max_examples=30, deadline=None)
@given(st.integers(1, podsecurity.MAX_ID), st.integers(0, podsecurity.MAX_ID))
def test_any_non_root_uid_and_any_gid_are_taken(uid, gid):
    settings = parsed(f"--run-as-user={uid}", f"--run-as-group={gid}")
    assert (settings.run_as_user, settings.run_as_group) == (uid, gid)
    assert jobspec.to_args(settings) == ["--num-gpus=1", "--image=img:1", "--port=12345",
                                         "--filename=/opt/distributetrain/train.py", "--host-network=false",
                                         f"--run-as-user={uid}", f"--run-as-group={gid}"]


@pytest.mark.parametrize("argv,says", [
    (("--run-as-user=0",), "--run-as-user: must be a UID from 1 to 2147483647 (never 0: job pods never run as "
                           "root), auto or platform, got '0'"),
    (("--run-as-user=root",), "--run-as-user: must be a UID from 1 to 2147483647"),
    (("--run-as-user=2147483648",), "--run-as-user: must be a UID from 1 to 2147483647"),
    (("--run-as-user=-5",), "--run-as-user: must be a UID from 1 to 2147483647"),
    (("--run-as-group=wheel",), "--run-as-group: must be a GID from 0 to 2147483647, got 'wheel'"),
    (("--run-as-group=²",), "--run-as-group: must be a GID from 0 to 2147483647, got '²'"),
    (("--pvc=data:/tmp",), "--pvc: /tmp is the job's own scratch volume, got data:/tmp"),
])
def test_bad_ids_are_bad_input_naming_the_flag_and_form(argv, says):
    with pytest.raises(errors.UsageError) as refused:
        parsed(*argv)
    assert str(refused.value).startswith(says) and "\n" not in str(refused.value)
