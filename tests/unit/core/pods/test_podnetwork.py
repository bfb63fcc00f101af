"""A pod network of IPv6 alone cannot run horovodrun across pods: such a job is bad input,
unless all its ranks stay in the chief's pod."""

import pytest

from distributetrain.core.pods import podnetwork
from distributetrain.core.placement import topology
from distributetrain.core.settings import JobSettings

JOB = JobSettings(job_name="demo", namespace="ml", num_gpus=4, image="img:1")
ONE_NODE = topology.parse("kubernetes.io/hostname!")


@pytest.mark.parametrize("pod_ips, settings, refused", [
    (["fd00::a"], JOB, True),
    (["fd00::a", "2001:db8::a"], JOB.replace(elastic_timeout_s=60.0, min_gpus=2), True),
    (["fd00::a", "10.0.0.9"], JOB, False),  # dual-stack, IPv6 first
    (["10.0.0.9", "fd00::a"], JOB, False),
    (["10.0.0.9"], JOB, False),
    ([""], JOB, False),  # no address known yet: nothing to say
    (["fd00::a"], JOB.replace(num_gpus=1), False),  # the chief alone: horovodrun over loopback
    (["fd00::a"], JOB.replace(topology=ONE_NODE), False),  # one node required: one pod
    (["fd00::a"], JOB.replace(topology=topology.parse("kubernetes.io/hostname")), True),  # preferred, not required
    (["fd00::a"], JOB.replace(host_network=True), False),  # the nodes' addresses, not the pod network's
])
def test_ipv6_alone_refuses_a_job_whose_ranks_span_pods(pod_ips, settings, refused):
    why = podnetwork.ipv6_only_refusal(pod_ips, settings)
    assert (why is not None) is refused
    if refused:
        assert "fd00::a" in why and "--topology kubernetes.io/hostname!" in why and "dual-stack" in why
