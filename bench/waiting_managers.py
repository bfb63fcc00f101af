"""How many API requests managers make while they wait for GPUs, before and after
following free GPUs with watches (issue 21, item 9).

Why: a manager waiting for GPUs (``--wait-for-gpus``) used to take the placement Lease
and list every node and every pod at least every 10 s. Each waiting manager adds that
load to the API server for as long as it waits, and the lists grow with the cluster
(one request per 500 pods). Now it lists once and follows watches (``freegpus``),
taking the Lease and a fresh list only when its request would fit.

Setup: two nodes of our own with one GPU each, both GPUs held by pods bound to them, and
``MANAGERS`` managers each asking for one GPU with ``--wait-for-gpus``: none can be
placed. The managers run in one process, a thread each, each with its own API client as
a manager pod has, and a stand-in manager pod carrying its annotations and Events. Each
runs its attempt's placement, the step that waits for GPUs (``DirectPlacement.place``
today; the *before* arm needs that tree's own names here). After
``WARMUP_S`` (every manager's first plan, and its watches' first lists) every HTTP
request any of them sends is counted for ``WINDOW_S``, at the client: the REST layer all
of them go through, by kind (list, watch, Lease, pod patch, Event).

Arms, each in a process of its own: *after*, this tree's ``distributetrain``; *before*,
the ``distributetrain`` of commit ``--before`` (default ``BEFORE_REV``, the last one
that re-planned every 10 s), extracted with ``git archive`` and found first on the
module path.

Run: ``bench/isolated.sh python -m bench.waiting_managers`` (root; about 3.5 minutes,
with a cluster of its own), or ``python -m bench.waiting_managers`` on the running
local cluster.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

from kubernetes import client
from kubernetes.client import rest

from bench import report, testbed

NAME = "waiting-managers"
BEFORE_REV = "1e830fb"  # main before the waiting managers followed watches
MANAGERS = 20
WARMUP_S = 20.0  # every manager planned once and (after) its watches listed
WINDOW_S = 60.0  # requests counted over this
# The managers' wait ends after the window: each plans a last time and fails (69).
WAIT_FOR_GPUS_S = WARMUP_S + WINDOW_S + 5
MANAGER_END_S = 120.0  # after their wait: every manager has returned by then
ARM_TIMEOUT_S = 240.0
NODES = {"a": 1, "b": 1}
HOLDER_IMAGE = "distributetrain/base:0.1.0"


# -- one arm, in a process of its own ------------------------------------------------

class RequestCounter:
    """Every request sent through the Kubernetes client's REST layer, by kind, while on."""

    def __init__(self):
        self.counts: Counter = Counter()
        self.on = False
        self._lock = threading.Lock()
        original = rest.RESTClientObject.request
        counter = self

        def counted(rest_client, method, url, *args, **kwargs):
            if counter.on:
                kind = request_kind(method, url, kwargs.get("query_params") or ())
                with counter._lock:
                    counter.counts[kind] += 1
            return original(rest_client, method, url, *args, **kwargs)

        rest.RESTClientObject.request = counted


def request_kind(method: str, url: str, query: list[tuple[str, object]]) -> str:
    """"list pods", "watch nodes", "update leases", "patch pods", "create events", ..."""
    parts = urlparse(url).path.strip("/").split("/")
    tail = parts[2:] if parts[0] == "api" else parts[3:]  # after /api/v1 or /apis/<group>/<version>
    if tail[0] == "namespaces" and len(tail) > 2:
        tail = tail[2:]  # a namespaced resource
    resource, collection = tail[0], len(tail) == 1
    watch = any(key == "watch" and str(value).lower() == "true" for key, value in query)
    verb = {"GET": ("watch" if watch else "list") if collection else "get",
            "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
    return f"{verb} {resource}"


def waiting_manager(kubeconfig: str, settings, outcome: dict) -> None:
    """One manager waiting for GPUs: the direct placement of its attempt until its wait ends."""
    from distributetrain.core import errors
    from distributetrain.core.clock import RealClock
    from distributetrain.kube import waits
    from distributetrain.kube.events import EventRecorder
    from distributetrain.kube.client import Kube
    from distributetrain.kube.connection import load_api_client
    from distributetrain.manager.reporting import jobevents
    from distributetrain.manager.pods.discovery import HostList
    from distributetrain.manager.reporting.errorcodes import exit_code_of
    from distributetrain.core.names import Attempt
    from distributetrain.manager.placement.kinds import kind_of
    from distributetrain.manager.placement.directplacement import DirectPlacement
    from distributetrain.manager.reporting.reporting import Reporter
    from distributetrain.manager.processstate import ProcessState

    clock = RealClock()
    kube = Kube(load_api_client(kubeconfig=kubeconfig), clock)
    recorder = EventRecorder.for_manager(kube, settings, clock, jobevents.KINDS)
    state = ProcessState(settings, Reporter(kube, settings, recorder), Attempt(settings.job_name), math.inf,
                         clock.monotonic() + settings.wait_for_gpus_s, HostList(), clock,
                         waits.selected_pods(kube, settings.namespace, settings.selector, clock))
    placement = DirectPlacement(kube, state, kind_of(settings))
    try:
        placement.place()
        outcome[settings.job_name] = "placed"
    except errors.DistributeTrainError as e:
        outcome[settings.job_name] = f"exit {exit_code_of(e)}"
    finally:
        recorder.close()


def run_arm(arm: str, namespace: str, selector: str) -> dict:
    import distributetrain
    from localcluster.cluster import Cluster

    cluster = Cluster.attach()
    api_client = cluster.api_client()
    counter = RequestCounter()
    threads, outcome = [], {}
    for index in range(MANAGERS):
        job = f"wait-{arm}-{index:02d}"
        uid = testbed.stand_in_manager(api_client, namespace, job)
        settings = testbed.job_settings(
            namespace, f"--job-name={job}", f"--owner-uid={uid}", "--num-gpus=1", f"--image={HOLDER_IMAGE}",
            f"--node-selector={selector}", f"--wait-for-gpus={WAIT_FOR_GPUS_S:.0f}s")
        threads.append(threading.Thread(target=waiting_manager, args=(str(cluster.kubeconfig), settings, outcome),
                                        name=job, daemon=True))
    for thread in threads:
        thread.start()
    time.sleep(WARMUP_S)
    counter.on = True
    time.sleep(WINDOW_S)
    counter.on = False
    give_up_at = time.monotonic() + WAIT_FOR_GPUS_S - WARMUP_S - WINDOW_S + MANAGER_END_S
    for thread in threads:
        thread.join(max(0.0, give_up_at - time.monotonic()))
    per_minute = {kind: round(count * 60 / WINDOW_S, 1) for kind, count in sorted(counter.counts.items())}
    return {"arm": arm, "code": str(Path(distributetrain.__file__).resolve().parent), "managers": MANAGERS,
            "window_s": WINDOW_S, "requests_per_minute": per_minute,
            "total_per_minute": round(sum(counter.counts.values()) * 60 / WINDOW_S, 1),
            "outcomes": dict(Counter(outcome.values())), "still_running": sum(t.is_alive() for t in threads)}


# -- both arms ------------------------------------------------------------------------

def arm_process(arm: str, code: Path, namespace: str, selector: str) -> dict:
    """Run one arm in a child process whose ``distributetrain`` is the one in ``code``."""
    # -P: no current directory first on the path, so PYTHONPATH decides; bench and
    # localcluster are this tree's in both arms.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys([str(code), str(report.REPO_ROOT)])))
    done = subprocess.run(
        [sys.executable, "-P", "-m", "bench.waiting_managers", "--arm", arm, "--namespace", namespace,
         "--selector", selector], env=env, cwd=report.REPO_ROOT, capture_output=True, text=True,
        timeout=ARM_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"arm {arm} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(report.REPO_ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def extract_package(rev: str, into: Path) -> None:
    """``distributetrain/`` as it was at ``rev``, into a directory of its own."""
    archive = subprocess.run(["git", "-C", str(report.REPO_ROOT), "archive", "--format=tar", rev, "distributetrain"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def holder_pod(node: str, index: int) -> dict:
    """A pod bound to ``node`` holding its one GPU (it need not even start to hold it)."""
    return {"metadata": {"name": f"holder-{index}"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": HOLDER_IMAGE, "command": ["sleep", "3600"],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def table(arms: list[dict]) -> str:
    kinds = sorted({kind for arm in arms for kind in arm["requests_per_minute"]})
    rows = [[kind, *(arm["requests_per_minute"].get(kind, 0) for arm in arms)] for kind in kinds]
    rows.append(["**all requests**", *(f"**{arm['total_per_minute']}**" for arm in arms)])
    rows.append(["per manager", *(round(arm["total_per_minute"] / arm["managers"], 1) for arm in arms)])
    return report.markdown_table(["requests per minute", *(arm["arm"] for arm in arms)], rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default=BEFORE_REV, metavar="REV",
                        help="the commit whose distributetrain is the 'before' arm (default: %(default)s)")
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # a child process: run one arm
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    parser.add_argument("--selector", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(threadName)s %(levelname)s %(message)s")
    if args.arm:
        print(json.dumps(run_arm(args.arm, args.namespace, args.selector)), flush=True)
        return
    prefix = f"bwm{testbed.short_id()}"
    with testbed.local_cluster() as cluster, tempfile.TemporaryDirectory(prefix="dt-bench-before-") as before:
        extract_package(args.before, Path(before))
        api_client = cluster.api_client()
        with testbed.node_pool(cluster, prefix, NODES) as selector, \
                testbed.namespace(api_client, "bench-waiting") as namespace:
            core = client.CoreV1Api(api_client)
            for index, name in enumerate(NODES):
                core.create_namespaced_pod(namespace, holder_pod(f"{prefix}-{name}", index))
            arms = []
            for arm, code, commit in (("before", Path(before), git("rev-parse", "--short", args.before)),
                                      ("after", report.REPO_ROOT, git("describe", "--always", "--dirty"))):
                arms.append(arm_process(arm, code, namespace, selector) | {"commit": commit})
                print(json.dumps(arms[-1]), flush=True)
                testbed.delete_pods(api_client, namespace, "distributetrain.io/role=manager")
    report.write_results(NAME, {"managers": MANAGERS, "window_s": WINDOW_S, "warmup_s": WARMUP_S,
                                "nodes": NODES, "arms": arms})
    print(table(arms))


if __name__ == "__main__":
    main()
