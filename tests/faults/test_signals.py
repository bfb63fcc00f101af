"""Deleting the chief signals training: SIGTERM reaches horovodrun and rank 0 (not a
PID 1 that ignores it), in time for rank 0 to save its work before the grace period.
(Ranks started over SSH on workers are not signalled yet: their session closes without
a hang-up; they end when the manager deletes their worker.)

Rank 0 runs in the chief (it is first in the hostfile); its handler writes a marker on
the job's volume, which outlives the deleted pod, and exits.
"""

import time

import pytest

from jobharness import job_args, node_pool, script_volume

pytestmark = pytest.mark.cluster

GRACEFUL = """\
import os, signal, sys, time
rank = os.environ.get("HOROVOD_RANK")

def saved(signum, _frame):
    with open(f"/work/rank{rank}-{signal.Signals(signum).name}", "w") as marker:
        marker.write(str(time.time()))
    sys.exit(0)

signal.signal(signal.SIGTERM, saved)
signal.signal(signal.SIGHUP, saved)
print(f"rank={rank} waiting", flush=True)
time.sleep(600)
"""
SIGNALLED_WITHIN_S = 8.0  # the chief's grace period is 10 s


def test_deleting_the_chief_delivers_sigterm_to_rank_0(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, {"graceful.py": GRACEFUL}, tmp_path) as claim:
        args = job_args(pool, claim, 2)
        args[args.index("--filename=/work/hello.py")] = "--filename=/work/graceful.py"
        jobs.submit("sig", args)
        volume = tmp_path / "volume"
        give_up_at = time.monotonic() + 180
        while "rank=0 waiting" not in jobs.log_tail("sig-chief") or "rank=1 waiting" not in jobs.log_tail("sig-chief"):
            assert time.monotonic() < give_up_at, jobs.log_tail("sig")
            time.sleep(0.5)
        deleted_at = time.time()
        jobs.core.delete_namespaced_pod("sig-chief", namespace)
        marker = volume / "rank0-SIGTERM"
        while not marker.exists():
            assert time.time() - deleted_at < SIGNALLED_WITHIN_S, (
                f"rank 0 got no SIGTERM within {SIGNALLED_WITHIN_S}s of the chief's deletion; "
                f"volume: {sorted(p.name for p in volume.iterdir())}")
            time.sleep(0.2)
        assert float(marker.read_text()) - deleted_at < SIGNALLED_WITHIN_S
        jobs.exit_code("sig")  # the manager ends the job; nothing is left
        jobs.wait_gone(["sig-worker-0", "sig-chief"])
