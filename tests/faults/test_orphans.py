"""A job pod's life is bounded: a worker whose manager is gone ends once no chief trains
through it, so no GPU is held by a dead job.

The manager is killed outright (its container's processes SIGKILLed): its pod stays, Failed,
so the garbage collector deletes nothing, as when a manager's node hangs and its pod stays
Terminating. Without a bound, the workers would run sshd, holding their GPUs, for ever.
"""

import subprocess
import time

import pytest

from harness.polling import poll_until
from jobharness import SCRIPTS, job_args, node_pool, release_ranks, script_volume

pytestmark = pytest.mark.cluster

ORPHAN_TIMEOUT_S = 10
# The worker checks every timeout/4 (3 s), ends within its 10 s grace period.
ENDS_WITHIN_S = ORPHAN_TIMEOUT_S + 30


def ended(pod: dict | None) -> bool:
    return pod is None or pod["status"].get("phase") in ("Succeeded", "Failed")


def test_a_worker_whose_manager_is_gone_ends_once_its_chief_is_done(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("orphan", job_args(pool, claim, 2, f"--orphan-timeout={ORPHAN_TIMEOUT_S}s",
                                       script_args=("0", "hold")))
        jobs.wait_for("orphan", lambda p: (p["metadata"].get("annotations") or {}).get(
            "distributetrain.io/phase") == "Training", 120)
        # Both ranks train (one through the worker).
        poll_until(lambda: "rank=1" in jobs.logs("orphan-chief"), 60,
                   lambda: f"rank=1 in orphan-chief's log, which is:\n{jobs.logs('orphan-chief')}")
        # Every process of the manager's container (manager.sh and the phase it runs).
        subprocess.run(["pkill", "-KILL", "-f", f"node-selector={pool.selector}"], check=True)
        assert jobs.exit_code("orphan", timeout_s=60) == 137

        # Training goes on through the worker: it does not end while the chief is connected.
        time.sleep(ENDS_WITHIN_S)
        assert jobs.pod("orphan-worker-0")["status"]["phase"] == "Running", jobs.pod("orphan-worker-0")["status"]

        release_ranks(tmp_path)
        chief = jobs.wait_for("orphan-chief", ended, 60)
        assert chief["status"]["phase"] == "Succeeded", jobs.logs("orphan-chief")
        started = time.monotonic()
        worker = jobs.wait_for("orphan-worker-0", ended, ENDS_WITHIN_S + 30)
        took_s = time.monotonic() - started
        print(f"the orphaned worker ended {took_s:.1f}s after its chief")
        assert took_s <= ENDS_WITHIN_S
        assert worker is None or "has not answered" in jobs.logs("orphan-worker-0")
        # The manager pod is still there (Failed): nothing but the bound freed the worker's GPUs.
        assert jobs.pod("orphan") is not None
