"""Pre-flight: bad input the cluster reveals is refused before anything is created."""

import pytest

from distributetrain.core import errors, exitcodes, validation
from distributetrain.core.placement import topology
from distributetrain.core.settings import JobSettings
from distributetrain.manager.job import pretraining
from distributetrain.manager.reporting.errorcodes import exit_code_of
from harness.builders import MANAGER_POD, manager_pod
from harness.kube import FakeKube

SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="img:1",
                       discovery_url="http://10.0.0.9:8470/hosts")


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_host_network_where_pod_security_forbids_it_is_bad_input_naming_the_level(level):
    kube = FakeKube()
    kube.namespaces["ml"] = {validation.POD_SECURITY_ENFORCE_LABEL: level}
    with pytest.raises(errors.UsageError) as refused:
        pretraining.preflight(kube, SETTINGS.replace(host_network=True))
    assert exit_code_of(refused.value) == exitcodes.USAGE
    assert str(refused.value).startswith("--host-network: ") and repr(level) in str(refused.value)
    assert "\n" not in str(refused.value)
    assert kube.actions == []


@pytest.mark.parametrize("labels", [{}, {validation.POD_SECURITY_ENFORCE_LABEL: "privileged"},
                                    {"pod-security.kubernetes.io/warn": "restricted"}])
def test_host_network_where_pod_security_allows_it_passes(labels):
    kube = FakeKube()
    kube.namespaces["ml"] = labels
    pretraining.preflight(kube, SETTINGS.replace(host_network=True))


def test_a_restricted_namespace_takes_a_job_on_the_pod_network():
    kube = FakeKube()
    kube.namespaces["ml"] = {validation.POD_SECURITY_ENFORCE_LABEL: "restricted"}
    pretraining.preflight(kube, SETTINGS)


def test_a_manager_not_allowed_to_create_network_policies_stops_before_anything_exists():
    """Isolation is a guarantee: without its RBAC rule the job exits 77, not unisolated."""
    kube = FakeKube()
    refusal = 'networkpolicies.networking.k8s.io is forbidden: User "system:serviceaccount:ml:m" cannot create resource'

    def refuse_policies(obj: dict) -> None:
        if obj["kind"] == "NetworkPolicy":
            raise errors.Forbidden(refusal)

    kube.on_create.append(refuse_policies)
    with pytest.raises(errors.Forbidden) as refused:
        pretraining.preflight(kube, SETTINGS)
    assert exit_code_of(refused.value) == exitcodes.PERMISSION_DENIED
    assert kube.actions == []
    pretraining.preflight(kube, SETTINGS.replace(network_policy=False))


PULL = SETTINGS.replace(image_pull_secrets=("regcred",))


def pull_secret(name="regcred", kind="kubernetes.io/dockerconfigjson"):
    return {"kind": "Secret", "metadata": {"name": name, "namespace": "ml"}, "type": kind,
            "data": {".dockerconfigjson": "e30="}}


@pytest.mark.parametrize("secret, says", [
    (None, "no Secret 'regcred' in namespace 'ml' (create it there first, e.g. kubectl create secret "
           "docker-registry regcred -n ml"),
    (pull_secret(kind="Opaque"), "Secret 'regcred' is of type 'Opaque'; the kubelet pulls only with "
                                 "kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg Secrets"),
])
def test_an_image_pull_secret_missing_or_of_another_type_is_bad_input(secret, says):
    """The kubelet would pull without it and, from a private registry, fail after the GPUs were taken."""
    kube = FakeKube()
    if secret:
        kube.put(secret)
    with pytest.raises(errors.UsageError) as refused:
        pretraining.preflight(kube, PULL)
    assert str(refused.value).startswith("--image-pull-secret: ") and says in str(refused.value)
    assert kube.actions == [] and kube.dry_runs == []


@pytest.mark.parametrize("kind", ["kubernetes.io/dockerconfigjson", "kubernetes.io/dockercfg"])
def test_an_image_pull_secret_of_a_pull_type_passes(kind):
    kube = FakeKube()
    kube.put(pull_secret(kind=kind))
    pretraining.preflight(kube, PULL)


def manager_with(*addresses):
    pod = manager_pod()
    pod["status"].update(podIP=addresses[0], podIPs=[{"ip": address} for address in addresses])
    return pod


IN_POD = SETTINGS.replace(owner_uid="uid-1", job_name=MANAGER_POD, discovery_url="http://[fd00::a]:8470/hosts")


@pytest.mark.parametrize("addresses, settings, refused", [
    (("fd00::a",), IN_POD, True),
    (("fd00::a", "10.0.0.9"), IN_POD, False),
    (("fd00::a",), IN_POD.replace(num_gpus=1), False),
    (("fd00::a",), IN_POD.replace(topology=topology.parse("kubernetes.io/hostname!")), False),
])
def test_a_pod_network_of_ipv6_alone_is_bad_input_for_a_job_spanning_pods(addresses, settings, refused):
    """horovodrun would fail once the pods held their GPUs (Horovod's driver needs IPv4)."""
    kube = FakeKube(manager=manager_with(*addresses))
    if not refused:
        pretraining.preflight(kube, settings)
        return
    with pytest.raises(errors.UsageError) as refusal:
        pretraining.preflight(kube, settings)
    assert str(refusal.value).startswith("--topology: the cluster's pods have IPv6 addresses only (the manager's: "
                                         "fd00::a)")
    assert kube.actions == [] and kube.dry_runs == []


@pytest.mark.parametrize("refusal, flag", [
    (errors.forbidden('pods "demo-worker-0" is forbidden: pod rejected: RuntimeClass "nvidia" not found'),
     "--runtime-class"),
    (errors.forbidden('pods "demo-worker-0" is forbidden: no PriorityClass with name high was found'),
     "--pod-priority-class"),
    (errors.Invalid('Pod "demo-worker-0" is invalid: spec.containers[0].resources.requests: Invalid value: "2": '
                    'must be less than or equal to cpu limit of 1'), "--cpu-limit-per-gpu"),
])
def test_a_dry_run_refusing_a_pod_knob_is_bad_input_naming_its_flag(refusal, flag):
    kube = FakeKube()

    def refuse_pods(obj: dict) -> None:
        if obj["kind"] == "Pod":
            raise refusal

    kube.on_create.append(refuse_pods)
    with pytest.raises(errors.UsageError) as refused:
        pretraining.preflight(kube, SETTINGS.replace(runtime_class="nvidia", pod_priority_class="high"))
    assert refused.value.flag == flag and exit_code_of(refused.value) == exitcodes.USAGE
    assert "\n" not in str(refused.value) and kube.actions == []


def test_another_admission_refusal_keeps_its_own_exit_code():
    kube = FakeKube()
    refusal = errors.forbidden('pods "demo-worker-0" is forbidden: violates PodSecurity "restricted:latest": ...')

    def refuse_pods(obj: dict) -> None:
        if obj["kind"] == "Pod":
            raise refusal

    kube.on_create.append(refuse_pods)
    with pytest.raises(errors.AdmissionRefused):
        pretraining.preflight(kube, SETTINGS)


# OpenShift's answer to a pod no SCC admits (a 403), a UID outside the namespace's range.
SCC_REFUSAL = ('pods "demo-worker-0" is forbidden: unable to validate against any security context constraint: '
               '[provider "restricted-v2": .spec.securityContext.runAsUser: Invalid value: 2000: must be in the '
               'ranges: [1000680000, 1000689999]]')


FS_GROUP_REFUSAL = ('pods "demo-worker-0" is forbidden: unable to validate against any security context constraint: '
                    '[provider "restricted-v2": .spec.securityContext.fsGroup: Invalid value: 5: must be in the '
                    'ranges: [1000680000, 1000689999]]')


@pytest.mark.parametrize("refusal,changes,flag", [
    (SCC_REFUSAL, {"run_as_user": 2000}, "--run-as-user"),
    (SCC_REFUSAL, {"run_as_user": 2000, "host_network": True}, "--host-network"),
    (FS_GROUP_REFUSAL, {"run_as_user": "platform", "run_as_group": 5}, "--run-as-group"),
], ids=["uid", "host-network", "group"])
def test_a_pod_the_platforms_security_constraints_refuse_is_bad_input_naming_the_flag(refusal, changes, flag):
    kube = FakeKube()

    def refuse_pods(obj: dict) -> None:
        if obj["kind"] == "Pod":
            raise errors.forbidden(refusal)

    kube.on_create.append(refuse_pods)
    with pytest.raises(errors.UsageError) as refused:
        pretraining.preflight(kube, SETTINGS.replace(**changes))
    assert exit_code_of(refused.value) == exitcodes.USAGE
    assert str(refused.value).startswith(f"{flag}: the namespace's security context constraints refuse the job's Pod")
    assert refusal in str(refused.value) and "\n" not in str(refused.value)
    assert kube.actions == []


def test_other_admission_refusals_stay_the_clusters():
    kube = FakeKube()

    def refuse(obj: dict) -> None:
        raise errors.forbidden('pods "demo-worker-0" is forbidden: violates PodSecurity "restricted:latest": '
                               'runAsNonRoot != true')

    kube.on_create.append(refuse)
    with pytest.raises(errors.AdmissionRefused):
        pretraining.preflight(kube, SETTINGS)
