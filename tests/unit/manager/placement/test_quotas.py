"""A ResourceQuota whose hard limit can never hold the whole job is bad input, named by
the flag that makes the job too large; nothing is created."""

import logging

import pytest

from distributetrain.core import errors
from distributetrain.core.placement import quotas
from distributetrain.core.settings import JobSettings, RuntimeClassTerms
from distributetrain.manager.job import pretraining
from distributetrain.manager.placement import quotacheck
from harness.kube import FakeKube

JOB = JobSettings(job_name="demo", namespace="ml", num_gpus=8, image="img:1", owner_uid="uid-1",
                  discovery_url="http://10.0.0.9:8470/hosts")


def quota(name="team", scopes=(), selector=(), **hard):
    spec = {"hard": {key.replace("_", "."): value for key, value in hard.items()}}
    if scopes:
        spec["scopes"] = list(scopes)
    if selector:
        spec["scopeSelector"] = {"matchExpressions": list(selector)}
    return {"metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize("hard,flag,says", [
    ({"requests.nvidia.com/gpu": "4"}, "--num-gpus", "requests.nvidia.com/gpu 8 at least, but ResourceQuota 'team' allows 4"),
    ({"requests.cpu": "8"}, "--cpu-per-gpu", "requests.cpu 16 at least, but ResourceQuota 'team' allows 8"),
    ({"cpu": "15500m"}, "--cpu-per-gpu", "cpu 16 at least, but ResourceQuota 'team' allows 15500m"),
    ({"limits.memory": "32Gi"}, "--memory-per-gpu", "limits.memory 64Gi at least, but ResourceQuota 'team' allows 32Gi"),
    ({"pods": "0"}, "--num-gpus", "pods 1 at least"),
])
def test_a_hard_limit_below_the_whole_job_names_its_flag(hard, flag, says):
    found = quotas.exceeded([{"metadata": {"name": "team"}, "spec": {"hard": hard}}], JOB)
    assert found.flag == flag and says in str(found)


@pytest.mark.parametrize("hard,settings,flag,says", [
    ({"limits.memory": "64Gi"}, JOB.replace(memory_limit_per_gpu_bytes=12 * 2**30), "--memory-limit-per-gpu",
     "limits.memory 96Gi at least"),
    ({"limits.cpu": "16"}, JOB.replace(cpu_limit_per_gpu_m=3000), "--cpu-limit-per-gpu", "limits.cpu 24 at least"),
    # The RuntimeClass's overhead is each pod's request too.
    ({"requests.cpu": "16"}, JOB.replace(runtime_class="kata", runtime_class_terms=RuntimeClassTerms(
        overhead=(("cpu", "250m"),))), "--cpu-per-gpu", "requests.cpu 16250m at least"),
])
def test_the_pods_limits_and_overhead_count_against_a_quota(hard, settings, flag, says):
    found = quotas.exceeded([{"metadata": {"name": "team"}, "spec": {"hard": hard}}], settings)
    assert found.flag == flag and says in str(found)
    assert quotas.exceeded([{"metadata": {"name": "team"}, "spec": {"hard": hard}}], JOB) is None


def test_limits_the_job_fits_and_what_the_job_does_not_request_are_no_bar():
    roomy = {"requests.nvidia.com/gpu": "8", "requests.cpu": "16", "requests.memory": "64Gi", "pods": "10",
             "limits.cpu": "1", "requests.ephemeral-storage": "0", "services": "0", "requests.amd.com/gpu": "0"}
    assert quotas.exceeded([{"metadata": {"name": "team"}, "spec": {"hard": roomy}}], JOB) is None


HIGH = JOB.replace(pod_priority_class="high")


@pytest.mark.parametrize("scopes,selector,settings,applies", [
    ((), (), JOB, True),
    (("NotTerminating",), (), JOB, True),
    (("Terminating",), (), JOB, False),
    (("Terminating",), (), JOB.replace(active_deadline_s=3600), True),  # activeDeadlineSeconds on the pods
    (("BestEffort",), (), JOB, False),  # job pods request cpu and memory: Burstable
    (("NotBestEffort",), (), JOB, True),
    ((), ({"scopeName": "Terminating", "operator": "DoesNotExist"},), JOB, True),
    ((), ({"scopeName": "PriorityClass", "operator": "In", "values": ["high"]},), JOB, False),
    ((), ({"scopeName": "PriorityClass", "operator": "NotIn", "values": ["high"]},), JOB, True),
    # --pod-priority-class: the pods' priorityClassName, which such scopes select by.
    ((), ({"scopeName": "PriorityClass", "operator": "In", "values": ["high"]},), HIGH, True),
    ((), ({"scopeName": "PriorityClass", "operator": "In", "values": ["low"]},), HIGH, False),
    ((), ({"scopeName": "PriorityClass", "operator": "NotIn", "values": ["high"]},), HIGH, False),
    ((), ({"scopeName": "PriorityClass", "operator": "Exists"},), HIGH, True),
    ((), ({"scopeName": "PriorityClass", "operator": "Exists"},), JOB, False),
    ((), ({"scopeName": "PriorityClass", "operator": "DoesNotExist"},), JOB, True),
    (("CrossNamespacePodAffinity",), (), JOB, False),
])
def test_only_quotas_whose_scopes_select_the_job_s_pods_count(scopes, selector, settings, applies):
    assert quotas.applies_to_job_pods(quota(scopes=scopes, selector=selector), settings) is applies


def test_the_manager_refuses_before_anything_is_created():
    kube = FakeKube()
    kube.quotas = [quota("roomy", requests_cpu="100"), quota("gpus", **{"requests.nvidia.com/gpu": "2"})]
    with pytest.raises(errors.UsageError, match=r"^--num-gpus: .* ResourceQuota 'gpus' allows 2 in namespace 'ml': "
                                                r"it can never admit the job$"):
        pretraining.preflight(kube, JOB)
    assert kube.actions == []


def test_without_the_rule_to_list_quotas_the_check_is_skipped_in_one_line(caplog):
    kube = FakeKube()
    kube.failures["list_all ResourceQuota"] = [errors.Forbidden('resourcequotas is forbidden: User "x" cannot list '
                                                         'resource "resourcequotas"')]
    kube.quotas = [quota(pods="0")]
    with caplog.at_level(logging.WARNING):
        quotacheck.check_quotas(kube, JOB)
    assert [r.getMessage() for r in caplog.records] == [
        "job demo: ResourceQuotas are not checked (resourcequotas is forbidden: User \"x\" cannot list resource "
        "\"resourcequotas\"; rbac/role.yaml grants resourcequotas list)"]
