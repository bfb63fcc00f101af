"""Nodes labelled into racks: a job one rack can hold lands on one rack (``--topology``).

Two racks of the test's own nodes: r1 with a=1 and b=1, r2 with c=2 and d=1. A 3-GPU job
fits two nodes either way; without the labels the planner takes c and a (ties by name,
across the racks), with ``--topology`` it takes c and d, the one rack that holds it. A
job no rack could ever hold, with the rack required, is bad input: it never crosses racks.
"""

import re

import pytest

from jobharness import SCRIPTS, job_args, more_nodes, node_pool, script_volume

pytestmark = pytest.mark.cluster

# A key the nodes' kubelets may set on themselves at registration: one of the kubernetes.io
# namespace (network.topology.kubernetes.io/rack) is the cluster's, set through the API.
RACK = "topology.example.com/rack"
PLANNED_TIMEOUT_S = 120.0


def test_a_job_one_rack_holds_lands_on_that_rack(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}, labels={RACK: "r1"}) as pool, \
            more_nodes(cluster, pool, {"c": 2, "d": 1}, labels={RACK: "r2"}), \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("racked", job_args(pool, claim, 3, f"--topology={RACK}"))
        assert jobs.exit_code("racked") == 0, jobs.report("racked")
        # The workers are gone with the job; the plan is in the manager's log, the chief is kept.
        assert jobs.pod("racked-chief")["spec"]["nodeName"] == pool.node("d")
        manager = jobs.pod("racked")
        assert manager["metadata"]["annotations"]["distributetrain.io/domains"] == "rack r2"
        assert f"{pool.node('c')}=2,{pool.node('d')}=1" in jobs.logs("racked")
        log = jobs.logs("racked-chief")
        assert sorted(int(r) for r in re.findall(r"rank=(\d+) size=3", log)) == [0, 1, 2]


def test_a_job_no_rack_could_hold_with_the_rack_required_is_bad_input(cluster, api_client, namespace, jobs,
                                                                       tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}, labels={RACK: "r1"}) as pool, \
            more_nodes(cluster, pool, {"c": 1}, labels={RACK: "r2"}), \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("unracked", job_args(pool, claim, 3, f"--topology={RACK}!"))
        assert jobs.exit_code("unracked", PLANNED_TIMEOUT_S) == 2
        assert "--topology: requested 3 GPUs but one rack of the nodes matching --node-selector holds 2" \
            in jobs.logs("unracked")
        assert not any(name.startswith("unracked-") for name in jobs.pods())
