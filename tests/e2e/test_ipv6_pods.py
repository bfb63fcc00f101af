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
