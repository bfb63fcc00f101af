"""Elastic jobs on the local cluster, with real training: base_image/train.py under
elastic horovodrun in the chief, hosts served by the manager pod.

A worker deleted mid-training does not end the job: the world shrinks and training goes
on. Its node is cordoned first, so no GPU is free and the smaller world is visible; once
the node is uncordoned, the manager adds a replacement worker (a fresh name) and the
world grows back. The job ends with exit 0 and everything it created is deleted.
"""

import re
import time

import pytest

from jobharness import node_pool
from polling import poll_until

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

# Enough epochs that the job still trains after shrinking and growing back. The shrink
# may come only after Gloo's 120 s timeout (a surviving rank caught in a collective with
# the lost one), and the node is uncordoned only then; growing back takes the
# replacement's start and the joining rank's TensorFlow import, about 40 s on 2 loaded
# cores. 80 epochs (~0.4 s each at size 2) ran out first in 2 of 7 runs. Few samples.
TRAIN_ARGS = ("--epochs=200", "--samples=768", "--batch-size=32")
WORLD_SIZE_LINE = re.compile(r"distributetrain: world size (\d+) -> (\d+) at epoch (\d+)")
EPOCH_LINE = re.compile(r"epoch=(\d+) .*size=(\d+)")
PHASE_TIMEOUT_S = 240
GLOO_TIMEOUT_S = 120  # distributetrain.core.manifests: horovodrun --gloo-timeout-seconds
POLL_S = 0.5


def wait_for_line(jobs, pod, pattern, after=0, timeout_s=PHASE_TIMEOUT_S):
    """The first match of ``pattern`` in the pod's log past offset ``after``."""
    return poll_until(lambda: pattern.search(jobs.log_tail(pod, lines=100000), after), timeout_s,
                      lambda: f"{pattern.pattern!r} in {pod}'s log:\n{jobs.log_tail(pod, lines=100000)[-4000:]}",
                      POLL_S, hopeless=lambda: (jobs.pod(pod) or {}).get("status", {}).get("phase")
                      in ("Succeeded", "Failed"))


def test_an_elastic_job_shrinks_when_a_worker_is_lost_and_grows_when_a_gpu_frees_up(cluster, api_client, jobs):
    core = jobs.core
    with node_pool(cluster, {"a": 1, "b": 1, "c": 1}) as pool:
        jobs.submit("flex", ["--num-gpus=3", "--elastic", "--min-gpus=2", "--image=distributetrain/base:0.1.0",
                             f"--node-selector={pool.selector}", "--worker-ready-timeout=90s",
                             "--elastic-timeout=120s", "--", *TRAIN_ARGS])
        first_epoch = wait_for_line(jobs, "flex-chief", EPOCH_LINE)
        assert first_epoch.group(2) == "3", jobs.log_tail("flex-chief")
        lost = jobs.pod("flex-worker-0")
        core.patch_node(lost["spec"]["nodeName"], {"spec": {"unschedulable": True}})
        try:
            core.delete_namespaced_pod("flex-worker-0", jobs.namespace)
            shrunk = wait_for_line(jobs, "flex-chief", WORLD_SIZE_LINE, first_epoch.end())
            assert shrunk.group(1, 2) == ("3", "2"), jobs.log_tail("flex-chief")
        finally:
            core.patch_node(lost["spec"]["nodeName"], {"spec": {"unschedulable": False}})
        try:
            grown = wait_for_line(jobs, "flex-chief", WORLD_SIZE_LINE, shrunk.end())
        except AssertionError as error:  # the chief's log alone cannot say why it did not grow back
            pods = {name: (p["status"].get("phase"), p["spec"].get("nodeName")) for name, p in jobs.pods().items()}
            raise AssertionError(f"{error}\npods: {pods}\nthe manager's log:\n{jobs.log_tail('flex')}") from None
        assert grown.group(1, 2) == ("2", "3"), jobs.log_tail("flex-chief")
        assert jobs.exit_code("flex", timeout_s=PHASE_TIMEOUT_S) == 0, jobs.log_tail("flex")
        manager_log = jobs.logs("flex")
        assert "replacing lost workers: 1 of 1 missing GPUs: flex-worker-2" in manager_log, manager_log
        jobs.wait_gone(["flex-worker-1", "flex-worker-2"])
        assert jobs.secrets("flex") == []


def test_an_elastic_job_below_min_gpus_fails_within_the_elastic_timeout(cluster, api_client, jobs):
    """horovod #3494: with fewer than --min-gpus left and none free, the job must not hang.

    Horovod gives up after --elastic-timeout; the manager blames the lost worker (exit 71
    with --max-restarts 0) and deletes everything the job created.
    """
    core = jobs.core
    elastic_timeout_s = 20
    with node_pool(cluster, {"a": 1, "b": 1}) as pool:
        jobs.submit("few", ["--num-gpus=2", "--elastic", "--min-gpus=2", "--image=distributetrain/base:0.1.0",
                            f"--node-selector={pool.selector}", f"--elastic-timeout={elastic_timeout_s}s",
                            "--", *TRAIN_ARGS])
        wait_for_line(jobs, "few-chief", EPOCH_LINE)
        lost = jobs.pod("few-worker-0")
        core.patch_node(lost["spec"]["nodeName"], {"spec": {"unschedulable": True}})
        try:
            core.delete_namespaced_pod("few-worker-0", jobs.namespace)
            deleted_at = time.monotonic()
            code = jobs.exit_code("few", timeout_s=elastic_timeout_s + GLOO_TIMEOUT_S + PHASE_TIMEOUT_S)
            took_s = time.monotonic() - deleted_at
        finally:
            core.patch_node(lost["spec"]["nodeName"], {"spec": {"unschedulable": False}})
        manager_log = jobs.logs("few")
        assert code == 71, manager_log
        assert "with 1 of --min-gpus 2 GPUs left: workers were lost" in manager_log, manager_log
        # Horovod's wait for enough hosts; before it, the surviving rank may wait out Gloo's
        # timeout in a collective with the lost one (horovodrun --gloo-timeout-seconds 120);
        # then Horovod's shutdown and the manager's teardown. Bounded, never a hang.
        assert took_s < elastic_timeout_s + GLOO_TIMEOUT_S + 60, f"took {took_s:.0f} s\n{manager_log}"
        jobs.wait_gone(["few-chief", "few-worker-0"])
        assert jobs.secrets("few") == []
