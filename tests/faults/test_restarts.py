"""--max-restarts on the local cluster: a pod lost mid-training starts the job again,
re-planned under fresh pod names; the restart is recorded on the manager pod."""

import time

import pytest

from jobharness import job_args, node_pool, script_volume

pytestmark = pytest.mark.cluster

# Every start appends to /work/starts (rank 0); ranks of the first start then train
# "for ever" (until the fault), those of a later start finish at once, as a script
# resuming from its last checkpoint would.
RESUMABLE = """\
import os, sys, time
rank = os.environ.get("HOROVOD_RANK")
if rank == "0":
    with open("/work/starts", "a") as f:
        f.write("x")
time.sleep(3)
starts = len(open("/work/starts").read())
print(f"rank={rank} start={starts} host={os.uname().nodename}", flush=True)
if starts == 1:
    time.sleep(300)
"""


def test_a_worker_deleted_mid_training_restarts_the_job_which_finishes(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1, "c": 1}) as pool, \
            script_volume(api_client, namespace, {"resumable.py": RESUMABLE}, tmp_path) as claim:
        args = job_args(pool, claim, 2, "--max-restarts=1")
        args[args.index("--filename=/work/hello.py")] = "--filename=/work/resumable.py"
        jobs.submit("again", args)
        give_up_at = time.monotonic() + 180
        while not all(f"rank={r} start=1" in jobs.log_tail("again-chief") for r in (0, 1)):
            assert time.monotonic() < give_up_at, jobs.log_tail("again")
            time.sleep(0.5)
        jobs.core.delete_namespaced_pod("again-worker-0", namespace)
        assert jobs.exit_code("again") == 0, jobs.log_tail("again")
        annotations = jobs.pod("again")["metadata"]["annotations"]
        assert annotations["distributetrain.io/restarts"] == "1"
        assert annotations["distributetrain.io/attempt"] == "1"
        assert annotations["distributetrain.io/last-restart-reason"].startswith("pod again-worker-0 ")
        assert "restart 1 of 1 (attempt 1)" in jobs.logs("again")
        # The second attempt ran under fresh names and found the first one's start.
        chief_log = jobs.log_tail("again-chief-r1")
        assert "rank=0 start=2" in chief_log and "rank=1 start=2" in chief_log
        jobs.wait_gone(["again-worker-0", "again-chief", "again-worker-0-r1"])
        assert jobs.secrets("again") == []
