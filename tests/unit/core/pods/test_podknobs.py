"""The pod knobs: what a RuntimeClass adds to a pod, and which flag an API server's
refusal of a job pod names (its words, as the apiserver's admission plugins and
validation write them)."""

import pytest

from distributetrain.core.pods import podknobs
from distributetrain.core.settings import JobSettings, RuntimeClassTerms

SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="img:1", runtime_class="kata-nvidia",
                       pod_priority_class="training-high")


@pytest.mark.parametrize("message, flag, says", [
    # plugin/pkg/admission/runtimeclass: a 403 from admission
    ('pods "demo-worker-0" is forbidden: pod rejected: RuntimeClass "kata-nvidia" not found', "--runtime-class",
     "no RuntimeClass 'kata-nvidia' in the cluster"),
    ('pods "demo-worker-0" is forbidden: conflict: runtimeClass.scheduling.nodeSelector[pool] = kata; '
     'pod.spec.nodeSelector[pool] = gpu', "--node-selector", "RuntimeClass 'kata-nvidia' requires other node labels"),
    # plugin/pkg/admission/priority
    ('pods "demo-worker-0" is forbidden: no PriorityClass with name training-high was found', "--pod-priority-class",
     "no PriorityClass 'training-high' in the cluster"),
    # validation of a container whose LimitRange default CPU limit is below its request
    ('Pod "demo-worker-0" is invalid: spec.containers[0].resources.requests: Invalid value: "2": must be less '
     'than or equal to cpu limit of 1', "--cpu-limit-per-gpu", "set --cpu-limit-per-gpu to at least --cpu-per-gpu"),
])
def test_a_refusal_of_a_knob_names_its_flag(message, flag, says):
    named, why = podknobs.refused_knob(message, SETTINGS)
    assert named == flag and says in why and "\n" not in why


def test_other_refusals_name_no_knob():
    assert podknobs.refused_knob('pods "x" is forbidden: violates PodSecurity "restricted:latest"', SETTINGS) is None


def test_a_runtime_class_adds_its_overhead_and_scheduling():
    runtime_class = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata-nvidia"},
                     "handler": "kata-qemu-nvidia-gpu", "overhead": {"podFixed": {"memory": "160Mi", "cpu": "250m"}},
                     "scheduling": {"nodeSelector": {"katacontainers.io/kata-runtime": "true"},
                                    "tolerations": [{"key": "kata", "operator": "Exists", "effect": "NoSchedule"}]}}
    assert podknobs.runtime_class_terms(runtime_class) == RuntimeClassTerms(
        overhead=(("cpu", "250m"), ("memory", "160Mi")),
        node_selector=(("katacontainers.io/kata-runtime", "true"),),
        tolerations=({"key": "kata", "operator": "Exists", "effect": "NoSchedule"},))
    # k3s's nvidia RuntimeClass: a handler, nothing else.
    assert podknobs.runtime_class_terms({"metadata": {"name": "nvidia"}, "handler": "nvidia"}) == RuntimeClassTerms()


def test_a_node_selector_the_runtime_class_contradicts_is_a_conflict():
    terms = RuntimeClassTerms(node_selector=(("pool", "kata"), ("zone", "a")))
    assert podknobs.selector_conflict(terms, SETTINGS.replace(node_selector=(("pool", "gpu"),))) == \
        "pool=gpu (RuntimeClass: kata)"
    assert podknobs.selector_conflict(terms, SETTINGS.replace(node_selector=(("pool", "kata"), ("rack", "r1")))) \
        is None


def test_candidates_need_the_runtime_class_labels_and_may_carry_its_taints():
    terms = RuntimeClassTerms(node_selector=(("pool", "kata"),),
                              tolerations=({"key": "kata", "operator": "Exists", "effect": "NoSchedule"},))
    job = SETTINGS.replace(node_selector=(("zone", "a"),), tolerations=({"key": "gpu", "operator": "Exists"},),
                           runtime_class_terms=terms)
    assert job.candidate_selector == {"pool": "kata", "zone": "a"}
    assert job.candidate_tolerations == ({"key": "gpu", "operator": "Exists"},
                                         {"key": "kata", "operator": "Exists", "effect": "NoSchedule"})
