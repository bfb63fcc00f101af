"""Volumes as clouds provision them, on the real scheduler: a claim whose volume only some
nodes mount puts the job there, and a job its claims could never serve is refused up
front, naming the claim.

The local cluster has no cloud disks. A local PersistentVolume with node affinity to
chosen nodes is what a zonal disk is to the scheduler (VolumeBinding refuses every other
node), and ReadWriteOncePod is the scheduler's own rule; ReadWriteOnce across nodes is the
attach-detach controller's, which local and hostPath volumes never meet, so it is proven
by the plan (the refusal of a job no one node holds).

Before the plan read the claims, the zonal job's worker was pinned to a node its volume
is not on and never scheduled ("didn't match PersistentVolume's node affinity"): exit 75
after --worker-ready-timeout. The refused jobs ran (ReadWriteOnce on hostPath) or waited
out the same timeout.
"""

import pytest

from distributetrain.core.placement.placement import parse_plan
from jobharness import SCRIPTS, job_args, node_pool, node_volume

pytestmark = pytest.mark.cluster

PLAN = "distributetrain.io/plan"


def test_a_job_on_a_zonal_claim_runs_on_the_nodes_its_volume_allows(cluster, api_client, namespace, jobs, tmp_path):
    # By GPUs alone the plan is {a, b} (ties go by name); the volume is on b and c only.
    with node_pool(cluster, {"a": 1, "b": 1, "c": 1}) as pool, \
            node_volume(api_client, namespace, "zonal", tmp_path / "zonal", SCRIPTS,
                        hostnames=(pool.hostname("b"), pool.hostname("c"))) as claim:
        jobs.submit("zonal", job_args(pool, claim, 2))
        assert jobs.exit_code("zonal") == 0, jobs.report("zonal")
        plan = dict(parse_plan(jobs.pod("zonal")["metadata"]["annotations"][PLAN]))
        assert plan == {pool.node("b"): 1, pool.node("c"): 1}, jobs.logs("zonal")


def test_a_job_its_claims_could_never_serve_is_refused_up_front_naming_the_claim(
        cluster, api_client, namespace, jobs, tmp_path):
    """Two 1-GPU nodes: no one node holds a 2-GPU job on a ReadWriteOnce or ReadWriteOncePod
    claim; a volume on no node of the pool holds none; a claim that does not exist, nothing."""
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            node_volume(api_client, namespace, "once", tmp_path / "once", SCRIPTS, ("ReadWriteOnce",)) as once, \
            node_volume(api_client, namespace, "one-pod", tmp_path / "one-pod", SCRIPTS,
                        ("ReadWriteOncePod",)) as one_pod, \
            node_volume(api_client, namespace, "elsewhere", tmp_path / "elsewhere", SCRIPTS,
                        hostnames=("no-such-node",)) as elsewhere:
        refused = {"once": (once, 2, "claim once is ReadWriteOnce: every pod of the job on one node"),
                   "one-pod": (one_pod, 2, "claim one-pod is ReadWriteOncePod: every pod of the job on one node"),
                   "elsewhere": (elsewhere, 1, "nodes cannot mount claim elsewhere (PersistentVolume "),
                   "absent": ("absent", 1, "no PersistentVolumeClaim 'absent' in namespace")}
        for job, (claim, gpus, _) in refused.items():
            jobs.submit(job, job_args(pool, claim, gpus))
        for job, (_, _, says) in refused.items():
            assert jobs.exit_code(job, timeout_s=120) == 2, jobs.report(job)
            errors = [line for line in jobs.logs(job).splitlines() if "error" in line.lower()]
            assert len(errors) == 1 and "--pvc" in errors[0] and says in errors[0], (job, jobs.logs(job))
        # Nothing was created: only the managers themselves exist, and no Secret.
        assert set(jobs.pods()) == set(refused), list(jobs.pods())
        assert [secret for job in refused for secret in jobs.secrets(f"{job}-")] == []
