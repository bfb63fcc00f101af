"""End to end on IPv6 pod addresses: nodes whose pods are dual-stack, IPv6 first (the
kubelet reports the IPv6 address as status.podIP, as on an IPv6 or IPv6-primary cluster).
The manager publishes the workers' IPv6 addresses on an IPv6 hosts URL, the chief names
them for Horovod and reaches them over SSH, and the job trains and cleans up."""

import ipaddress
import re

import pytest

from jobharness import node_pool

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

TRAIN_ARGS = ("--epochs=2", "--samples=768")
EPOCH_LINE = re.compile(r"epoch=(\d+) .*size=(\d+)")
HOROVODRUN_LINE = re.compile(r"distributetrain: horovodrun -np 3 on (.*)")


def is_ipv6(address: str) -> bool:
    return ipaddress.ip_address(address).version == 6


def test_a_job_trains_on_ipv6_pod_addresses(cluster, jobs):
    # The manager runs on the pool too (jobharness.manager_pod): its address is IPv6 as well.
    with node_pool(cluster, {"a": 2, "b": 1}, ipv6_first=True) as pool:
        jobs.submit("six", ["--num-gpus=3", "--image=distributetrain/base:0.1.0", f"--node-selector={pool.selector}",
                            "--worker-ready-timeout=90s", "--", *TRAIN_ARGS])
        worker = jobs.wait_for("six-worker-0", lambda pod: bool(pod.get("status", {}).get("podIP")), 180)
        manager = jobs.pod("six")
        assert is_ipv6(worker["status"]["podIP"]) and is_ipv6(manager["status"]["podIP"]), \
            (worker["status"], manager["status"])
        assert jobs.exit_code("six", timeout_s=300) == 0, jobs.report("six")
        chief = jobs.pod("six-chief")
        assert is_ipv6(chief["status"]["podIP"]), chief["status"]
        chief_log = jobs.logs("six-chief")
        hosts = HOROVODRUN_LINE.search(chief_log)
        # Horovod and ssh get a name for each IPv6 address (a hostfile line cannot hold one).
        # The chief is `localhost` to Horovod, which knows its own host by IPv4 addresses alone.
        expected = ["localhost slots=1", f"ipv6-{worker['status']['podIP'].replace(':', '-')} slots=2"]
        assert hosts and all(line in hosts.group(1) for line in expected), chief_log
        sizes = {int(m.group(2)) for m in EPOCH_LINE.finditer(chief_log)}
        assert sizes == {3}, chief_log  # Horovod's world across the two pods
        env = {e["name"]: e.get("value") for e in chief["spec"]["containers"][0]["env"]}
        assert env["DT_HOSTS_URL"] == f"http://[{manager['status']['podIP']}]:8470/hosts", env
        jobs.wait_gone(["six-worker-0"])
        assert jobs.secrets("six-") == []


def test_on_ipv6_only_pods_a_job_spanning_pods_is_refused_up_front_and_a_one_node_job_trains(cluster, jobs):
    """Pods with IPv6 addresses alone (the local cluster's ipv6_only nodes: as on EKS's IPv6
    clusters, an IPv4 interface for egress only, which Kubernetes does not report).
    horovodrun cannot connect ranks of several pods over IPv6 (Horovod's driver needs an
    IPv4 address): such a job is bad input before anything exists, not a
    failure once its pods hold their GPUs. One kept on one node trains, its ranks over loopback."""
    with node_pool(cluster, {"a": 2, "b": 1}, ipv6_only=True) as pool:
        base = ["--image=distributetrain/base:0.1.0", f"--node-selector={pool.selector}", "--worker-ready-timeout=90s"]
        jobs.submit("wide", ["--num-gpus=3", *base, "--", *TRAIN_ARGS])  # a worker and the chief: two pods
        jobs.submit("narrow", ["--num-gpus=2", *base, "--topology=kubernetes.io/hostname!", "--", *TRAIN_ARGS])
        assert jobs.exit_code("wide", timeout_s=120) == 2, jobs.report("wide")
        manager = jobs.pod("wide")
        assert [entry["ip"] for entry in manager["status"]["podIPs"]] == [manager["status"]["podIP"]]
        assert is_ipv6(manager["status"]["podIP"]), manager["status"]
        errors = [line for line in jobs.logs("wide").splitlines() if "error" in line.lower()]
        assert len(errors) == 1 and "--topology: the cluster's pods have IPv6 addresses only" in errors[0], errors
        assert [name for name in jobs.pods() if name.startswith("wide-")] == [] and jobs.secrets("wide-") == []
        assert jobs.exit_code("narrow", timeout_s=300) == 0, jobs.report("narrow")
        chief = jobs.pod("narrow-chief")
        assert [is_ipv6(entry["ip"]) for entry in chief["status"]["podIPs"]] == [True], chief["status"]
        sizes = {int(m.group(2)) for m in EPOCH_LINE.finditer(jobs.logs("narrow-chief"))}
        assert sizes == {2}, jobs.logs("narrow-chief")  # both ranks, in the chief's pod
