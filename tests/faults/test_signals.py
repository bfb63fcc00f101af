"""Deleting a job pod signals training: SIGTERM reaches every rank (not a PID 1 that
ignores it, nor only the SIGKILL that ends its container), in time for a rank to save
its work within the pods' 10 s grace period.

Rank 0 runs in the chief (it is first in the hostfile), rank 1 on the worker, started
over SSH. Each rank's handler writes a marker on the job's volume, which outlives the
deleted pods, and exits.
"""

import time
from pathlib import Path

import pytest

from distributetrain.core import exitcodes
from harness.polling import poll_until
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
SIGNALLED_WITHIN_S = 8.0  # the pods' grace period is 10 s
RANKS_WAITING_WITHIN_S = 300.0  # starting pods and ranks is slow on a loaded machine


def start_waiting_ranks(jobs, pool, claim: str) -> None:
    """Submit job "sig" (rank 0 on the chief, rank 1 on its worker) and wait until both ranks wait."""
    args = job_args(pool, claim, 2)
    args[args.index("--filename=/work/hello.py")] = "--filename=/work/graceful.py"
    jobs.submit("sig", args)
    poll_until(lambda: all(f"rank={rank} waiting" in jobs.log_tail("sig-chief") for rank in (0, 1)),
               RANKS_WAITING_WITHIN_S,
               lambda: f"ranks 0 and 1 waiting in sig-chief's log; the manager's log:\n{jobs.log_tail('sig')}")


def assert_sigterm(volume: Path, rank: int, deleted: str, deleted_at: float) -> None:
    marker = volume / f"rank{rank}-SIGTERM"
    while not (marker.exists() and marker.read_text()):  # created first, then written
        assert time.time() - deleted_at < SIGNALLED_WITHIN_S, (
            f"rank {rank} got no SIGTERM within {SIGNALLED_WITHIN_S}s of {deleted}'s deletion; "
            f"volume: {sorted(p.name for p in volume.iterdir())}")
        time.sleep(0.2)
    assert float(marker.read_text()) - deleted_at < SIGNALLED_WITHIN_S


def test_deleting_the_chief_delivers_sigterm_to_every_rank(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, {"graceful.py": GRACEFUL}, tmp_path) as claim:
        start_waiting_ranks(jobs, pool, claim)
        deleted_at = time.time()
        jobs.core.delete_namespaced_pod("sig-chief", namespace)
        # Rank 1's through its worker, which the manager deletes as soon as the chief goes.
        for rank in (0, 1):
            assert_sigterm(tmp_path / "volume", rank, "sig-chief", deleted_at)
        jobs.exit_code("sig")  # the manager ends the job; nothing is left
        jobs.wait_gone(["sig-worker-0", "sig-chief"])


def test_deleting_a_worker_delivers_sigterm_to_every_rank(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, {"graceful.py": GRACEFUL}, tmp_path) as claim:
        start_waiting_ranks(jobs, pool, claim)
        deleted_at = time.time()
        jobs.core.delete_namespaced_pod("sig-worker-0", namespace)
        # Rank 0's through the chief, which the manager deletes as it aborts the job.
        for rank in (1, 0):
            assert_sigterm(tmp_path / "volume", rank, "sig-worker-0", deleted_at)
        assert jobs.exit_code("sig") == exitcodes.WORKER_LOST
        jobs.wait_gone(["sig-worker-0", "sig-chief"])
