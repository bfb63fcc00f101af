"""Job pods on DRA nodes claim their share through a ResourceClaimTemplate of --device-class."""

import pytest

from distributetrain.core import errors, names
from distributetrain.core.placement import gpuclaims
from distributetrain.core.job import jobspec
from distributetrain.core.pods import manifests
from distributetrain.core.pods.sshkeys import JobKeys
from harness.builders import JOB

DRA_JOB = JOB.replace(device_class="gpu.example.com")
KEYS = JobKeys.generate("j")
PLAN = [("dra-a", 2), ("plugin-b", 1), ("dra-c", 2), ("dra-d", 3)]


def test_the_pods_on_dra_nodes_claim_their_share_the_others_request_the_extended_resource():
    secret, *templates_and_pods = gpuclaims.job_objects(DRA_JOB, PLAN, KEYS, dra_nodes={"dra-a", "dra-c", "dra-d"})
    templates, pods = templates_and_pods[:2], templates_and_pods[2:]
    labels = names.job_labels("j", names.ROLE_GPUS, "uid-1")
    assert templates == [{
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"j-gpus-{share}-uid-1", "namespace": "ns", "labels": labels,
                     **({"ownerReferences": manifests.owner_references(DRA_JOB)}
                        if manifests.owner_references(DRA_JOB) else {})},
        "spec": {"metadata": {"labels": labels}, "spec": {"devices": {"requests": [
            {"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com", "count": share}}]}}},
    } for share in (2, 3)]
    plain_secret, *plain_pods = manifests.job_objects(DRA_JOB, PLAN, KEYS)
    assert secret == plain_secret
    for pod, plain, (node, share) in zip(pods, plain_pods, PLAN):
        if node == "plugin-b":
            assert pod == plain
            continue
        expected = plain
        expected["metadata"]["labels"][names.LABEL_DRA_GPUS] = str(share)
        expected["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": f"j-gpus-{share}-uid-1"}]
        for container in expected["spec"]["containers"]:
            del container["resources"]["limits"]["nvidia.com/gpu"]
            container["resources"]["claims"] = [{"name": "gpus"}]
        assert pod == expected


def test_without_dra_nodes_the_objects_are_the_plain_ones():
    assert gpuclaims.job_objects(JOB, PLAN, KEYS) == manifests.job_objects(JOB, PLAN, KEYS)


def test_dra_gpus_are_not_queued():
    with pytest.raises(errors.UsageError, match="--device-class: cannot be used with --queue"):
        jobspec.settings(jobspec.parse_given({"num_gpus": "2", "image": "i", "queue": "q",
                                              "device_class": "gpu.example.com"}))
