"""`--host-network true`: every job pod on its node's network, and Horovod still trains.

No interface name of the chief's is forced on the other hosts (on real nodes they may
differ), and each rank's hostname resolves to its node's address for Gloo.
"""

import re

import pytest

from jobharness import SCRIPTS, job_args, node_pool, script_volume

pytestmark = pytest.mark.cluster

PORT = 12346  # a hostPort: two jobs on one node could not share it


def test_host_network_job_trains_across_two_nodes(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("hostnet", job_args(pool, claim, 2, "--host-network=true", f"--port={PORT}"))
        assert jobs.exit_code("hostnet") == 0, jobs.report("hostnet")
        chief = jobs.pod("hostnet-chief")  # kept for its logs; the worker is gone
        assert chief["spec"]["hostNetwork"] is True
        assert chief["status"]["podIP"] == chief["status"]["hostIP"]
        log = jobs.logs("hostnet-chief")
        launch = next(line for line in log.splitlines() if "horovodrun -np" in line)
        assert " over " not in launch, log  # no --network-interface forced on the other host
        hosts = dict(re.findall(r"rank=(\d+) size=2 host=(\S+)", log))
        assert hosts == {"0": pool.hostname("b"), "1": pool.hostname("a")}, log  # the machines' hostnames
