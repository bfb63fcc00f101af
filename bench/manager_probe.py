"""One manager of ``bench.many_managers``: the booking of one job, in a process of its own.

It imports what the manager imports and builds the job as pre-training does (its
settings parsed by the manager's own flags, its record and Events on a stand-in manager
pod), freezes its start-up as the manager does, then waits for the benchmark's word on
stdin, so that every manager of a run starts booking at the same moment whatever its
start-up took; it books (pre-training's placement: the survey, the Lease, the pods
created), and prints one JSON line: the seconds from the word to its pods created, the
CPU seconds it used meanwhile, its API requests (every HTTP request its clients sent),
and its peak resident memory. Its log (the manager's own lines, timed) goes to stderr.

Run from a tree's root (``python -m`` puts it first on the path), so a tree of another
commit measures that commit's manager: today's ``DirectPlacement.place``, or, in the tree
before issue 46, ``PreTraining._place`` and the classes that one took (``prepare``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import sys
import time

import urllib3

from bench import testbed
from bench.inventory_probe import admin_client, memory_mib
from distributetrain.core.names import Attempt
from distributetrain.kube.client import Kube
from distributetrain.kube.events import EventRecorder
from localcluster.cluster import Cluster

WAIT_FOR_GPUS_S = 1800.0  # a busy Lease is waited for as long: no manager gives up in a run


def count_requests() -> list[int]:
    """Every HTTP request this process sends, whatever client sends it."""
    sent = [0]
    urlopen = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def counted(self, *args, **kwargs):
        sent[0] += 1
        return urlopen(self, *args, **kwargs)

    urllib3.connectionpool.HTTPConnectionPool.urlopen = counted
    return sent


def book(namespace: str, job: str, gpus: int, selector: str, uid: str) -> dict:
    sent = count_requests()
    # The smallest requests both trees take; the nodes no kubelet heartbeats are tolerated
    # as NotReady (their taints), should the controllers have judged them before they stopped.
    settings = testbed.job_settings(namespace, f"--job-name={job}", f"--num-gpus={gpus}", f"--owner-uid={uid}",
                                    "--image=distributetrain/base:0.1.0", f"--node-selector={selector}",
                                    "--cpu-per-gpu=1m", "--memory-per-gpu=64Mi",
                                    f"--wait-for-gpus={WAIT_FOR_GPUS_S:.0f}s",
                                    "--toleration=node.kubernetes.io/not-ready",
                                    "--toleration=node.kubernetes.io/unreachable")
    place, reporter = prepare(settings, Attempt(job))
    freeze_start_up()
    baseline_mib = memory_mib("VmRSS")
    print("ready", flush=True)
    sys.stdin.readline()  # the benchmark's word: every manager books from here
    started, cpu_started = time.monotonic(), time.process_time()
    plan = place()
    seconds, cpu_s = time.monotonic() - started, time.process_time() - cpu_started
    reporter.events.close()
    return {"job": job, "gpus": gpus, "seconds": seconds, "cpu_s": cpu_s, "pods": len(plan), "requests": sent[0],
            "baseline_rss_mib": baseline_mib, "peak_rss_mib": memory_mib("VmHWM")}


def prepare(settings, attempt: Attempt):
    """Pre-training's booking of this tree, ready to call, and the job's reporter."""
    try:
        from distributetrain.manager.placement.directplacement import DirectPlacement
    except ImportError:  # the tree before issue 46
        return _prepare_before(settings, attempt)
    from distributetrain.core.clock import RealClock
    from distributetrain.kube import waits
    from distributetrain.manager.placement.kinds import kind_of
    from distributetrain.manager.pods.discovery import HostList
    from distributetrain.manager.processstate import ProcessState
    from distributetrain.manager.reporting import jobevents
    from distributetrain.manager.reporting.reporting import Reporter
    clock = RealClock()
    kube = Kube(admin_client(Cluster.attach(), pool_size=8), clock)
    reporter = Reporter(kube, settings, EventRecorder.for_manager(kube, settings, clock, jobevents.KINDS))
    state = ProcessState(settings, reporter, attempt, math.inf, clock.monotonic() + WAIT_FOR_GPUS_S, HostList(), clock,
                         waits.selected_pods(kube, settings.namespace, settings.selector, clock))
    return DirectPlacement(kube, state, kind_of(settings)).place, reporter


def freeze_start_up() -> None:
    """As the tree's manager does once started, if it does (``cli.main.freeze_start_up``)."""
    from distributetrain.cli import main as cli
    getattr(cli, "freeze_start_up", lambda: None)()


def _prepare_before(settings, attempt: Attempt):
    """The full inventory under the Lease: ``PreTraining._place`` of a ``Run`` (real clock),
    the modules where that tree has them."""
    from distributetrain.manager.discovery import HostList
    from distributetrain.manager.kinds import kind_of
    from distributetrain.manager.pretraining import PreTraining
    from distributetrain.manager.reporting import Reporter
    from distributetrain.manager.run import Run
    kube = Kube(admin_client(Cluster.attach(), pool_size=8))
    reporter = Reporter(kube, settings, EventRecorder.for_manager(kube, settings))
    run = Run(settings, reporter, attempt, math.inf, time.monotonic() + WAIT_FOR_GPUS_S, HostList())
    pretraining = PreTraining(kube, run, kind_of(settings))
    return (lambda: pretraining._place(run.gpus_until)), reporter


def main() -> None:
    # The benchmark ends a round's stragglers with SIGTERM: exiting through SystemExit runs
    # the client's atexit, which deletes the kubeconfig's keys it wrote to /tmp.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # The manager's own log lines, timed, in the round's log of this manager (--keep-logs).
    logging.basicConfig(level=logging.INFO, format="%(asctime)s.%(msecs)03d %(name)s %(message)s", datefmt="%H:%M:%S")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("namespace", "job", "selector", "uid"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--gpus", type=int, required=True)
    args = parser.parse_args()
    print(json.dumps(book(args.namespace, args.job, args.gpus, args.selector, args.uid)), flush=True)


if __name__ == "__main__":
    main()
