"""The job's RuntimeClass, read before the job plans: its overhead and scheduling planned
with, one that does not exist bad input before anything is created."""

import logging

import pytest

from distributetrain.core import errors, exitcodes
from distributetrain.core.clock import FakeClock
from distributetrain.core.settings import JobSettings, RuntimeClassTerms
from distributetrain.manager.job import lifecycle
from distributetrain.manager.pods import runtimeclass
from harness.builders import MANAGER_POD
from harness.kube import FakeKube

JOB = JobSettings(job_name=MANAGER_POD, namespace="ml", num_gpus=2, image="img:1", owner_uid="uid-1",
                  discovery_url="http://10.0.0.9:8470/hosts", runtime_class="kata-nvidia")
KATA = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata-nvidia"},
        "handler": "kata-qemu-nvidia-gpu", "overhead": {"podFixed": {"cpu": "250m", "memory": "160Mi"}},
        "scheduling": {"nodeSelector": {"pool": "kata"}}}


def with_runtime_class(obj=KATA):
    # On a fake clock: the job's Events, which no API here takes, are retried up to their
    # deadline, a step of the clock rather than seconds of real time.
    kube = FakeKube(clock=FakeClock())
    if obj:
        kube.custom[("runtimeclasses", None, obj["metadata"]["name"])] = obj
    return kube


def test_the_runtime_classs_terms_are_planned_with():
    settings = runtimeclass.with_runtime_class(with_runtime_class(), JOB)
    assert settings == JOB.replace(runtime_class_terms=RuntimeClassTerms(
        overhead=(("cpu", "250m"), ("memory", "160Mi")), node_selector=(("pool", "kata"),)))


def test_a_missing_runtime_class_is_bad_input_unless_the_pods_exist_already(caplog):
    with pytest.raises(errors.UsageError) as refused:
        runtimeclass.with_runtime_class(with_runtime_class(None), JOB)
    assert str(refused.value) == ("--runtime-class: no RuntimeClass 'kata-nvidia' in the cluster "
                                  "(kubectl get runtimeclass lists them)")
    with caplog.at_level(logging.WARNING):
        assert runtimeclass.with_runtime_class(with_runtime_class(None), JOB, strict=False) == JOB
    assert "no RuntimeClass 'kata-nvidia'" in caplog.text


def test_a_node_selector_the_runtime_class_contradicts_is_bad_input():
    with pytest.raises(errors.UsageError) as refused:
        runtimeclass.with_runtime_class(with_runtime_class(), JOB.replace(node_selector=(("pool", "gpu"),)))
    assert str(refused.value) == ("--node-selector: RuntimeClass 'kata-nvidia' runs pods only on nodes labelled "
                                  "otherwise: pool=gpu (RuntimeClass: kata)")


def test_without_the_rule_to_read_it_the_job_is_planned_without_its_terms(caplog):
    kube = with_runtime_class()
    kube.failures["read RuntimeClass"] = [errors.Forbidden('runtimeclasses.node.k8s.io "kata-nvidia" is forbidden: User '
                                                     '"system:serviceaccount:ml:distributetrain-manager" cannot get')]
    with caplog.at_level(logging.WARNING):
        assert runtimeclass.with_runtime_class(kube, JOB) == JOB
    assert "rbac/clusterrole.yaml grants runtimeclasses get" in caplog.text


def test_without_a_runtime_class_nothing_is_read():
    kube = with_runtime_class()
    kube.failures["read RuntimeClass"] = [AssertionError("read")]
    assert runtimeclass.with_runtime_class(kube, JOB.replace(runtime_class="")) == JOB.replace(runtime_class="")


def test_the_manager_exits_2_before_creating_anything_when_it_is_missing():
    kube = with_runtime_class(None)
    assert lifecycle.execute(kube, JOB, "pre-training", kube.clock) == exitcodes.USAGE
    assert kube.writes("create") == [] and kube.dry_runs == []
    assert kube.manager["metadata"]["annotations"]["distributetrain.io/exit-code"] == "2"
