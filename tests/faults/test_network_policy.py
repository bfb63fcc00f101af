"""Network isolation per job, with a real NetworkPolicy implementation: kube-router on the
test's own nodes (``localcluster.networkpolicy``). First kube-router itself, with a plain
policy between two pods; then a job: while it trains, a pod of another job is refused at
a worker's sshd, which the job's own chief reaches; the job exits 0 and leaves no policy.
In a job's namespace NetworkPolicies are on by default (the manager creates them), so
only these nodes, with kube-router, enforce them: other tests' nodes run none."""

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from kubernetes import client

from distributetrain.core import names
from distributetrain.core.settings import DEFAULT_PORT
from jobharness import SCRIPTS, NodePool, job_args, more_nodes, release_ranks, script_volume
from localcluster import binaries, networkpolicy

pytestmark = pytest.mark.cluster

IMAGE = "distributetrain/base:0.1.0"  # pre-pulled on every node
SERVER_PORT = 8000
READY_TIMEOUT_S = 120
# kube-router writes a new pod's address into its rules on the pod's update event: a few
# seconds at most on this machine. A connection is tried until it gets this verdict, or
# until then.
VERDICT_TIMEOUT_S = 20
CONNECT_TIMEOUT_S = 3
# Prints "connected", or why not; exits 0 either way (the verdict is the output).
CONNECT = """\
import socket, sys
s = socket.socket()
s.settimeout(float(sys.argv[3]))
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected")
except OSError as e:
    print(f"not connected: {e!r}")
"""


@contextmanager
def enforcing_pool(cluster, spec: dict[str, int]) -> Iterator[NodePool]:
    """The test's nodes, each with kube-router enforcing NetworkPolicies."""
    pool = NodePool("np" + uuid.uuid4().hex[:5])
    with more_nodes(cluster, pool, spec) as group, networkpolicy.enforced(group.nodes(), binaries.kube_router()):
        yield pool


def plain_pod(name: str, node: str, labels: dict[str, str], command: list[str]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "restartPolicy": "Never",
                     "containers": [{"name": "c", "image": IMAGE, "command": command}]}}


def start_pods(jobs, pods: list[dict]) -> dict[str, str]:
    """Create ``pods`` and wait until each runs; their addresses by name."""
    for pod in pods:
        jobs.core.create_namespaced_pod(jobs.namespace, pod)
    return {pod["metadata"]["name"]: jobs.wait_for(pod["metadata"]["name"], lambda p: p.get("status", {}).get("podIP")
                                                  and p["status"].get("phase") == "Running",
                                                  READY_TIMEOUT_S)["status"]["podIP"]
            for pod in pods}


def connect(cluster, namespace: str, pod: str, address: str, port: int, container: str | None = None) -> str:
    """What a TCP connect from ``pod`` to ``address:port`` gets: "connected" or why not."""
    which = ["-c", container] if container else []
    done = cluster.kubectl("exec", "-n", namespace, pod, *which, "--", "python3", "-c", CONNECT, address, str(port),
                           str(CONNECT_TIMEOUT_S))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def verdict(cluster, namespace: str, pod: str, address: str, port: int, connected: bool,
            container: str | None = None) -> str:
    """The connect's outcome once it is the one expected, or the last one after VERDICT_TIMEOUT_S."""
    give_up_at = time.monotonic() + VERDICT_TIMEOUT_S
    while True:
        outcome = connect(cluster, namespace, pod, address, port, container)
        if (outcome == "connected") == connected or time.monotonic() > give_up_at:
            return outcome
        time.sleep(1)


def test_kube_router_enforces_a_plain_policy(cluster, api_client, namespace, jobs):
    """A server admitting only pods labelled friend: a stranger on its node and one on the
    other node are refused; a friend on the other node connects; before the policy, all do."""
    server = ["python3", "-m", "http.server", str(SERVER_PORT)]
    idle = ["sleep", "300"]
    with enforcing_pool(cluster, {"a": 0, "b": 0}) as pool:
        addresses = start_pods(jobs, [plain_pod("server", pool.node("a"), {"role": "server"}, server),
                                      plain_pod("near-stranger", pool.node("a"), {"role": "stranger"}, idle),
                                      plain_pod("far-stranger", pool.node("b"), {"role": "stranger"}, idle),
                                      plain_pod("far-friend", pool.node("b"), {"role": "friend"}, idle)])
        server_ip = addresses["server"]
        assert verdict(cluster, namespace, "far-stranger", server_ip, SERVER_PORT, connected=True) == "connected"
        client.NetworkingV1Api(api_client).create_namespaced_network_policy(namespace, {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "friends-only"},
            "spec": {"podSelector": {"matchLabels": {"role": "server"}}, "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "friend"}}}]}]}})
        for stranger in ("near-stranger", "far-stranger"):
            refused = verdict(cluster, namespace, stranger, server_ip, SERVER_PORT, connected=False)
            assert refused.startswith("not connected"), (stranger, refused)
        assert verdict(cluster, namespace, "far-friend", server_ip, SERVER_PORT, connected=True) == "connected"


def test_another_job_s_pod_is_refused_at_a_worker_s_sshd_while_the_job_trains(cluster, api_client, namespace, jobs,
                                                                               tmp_path):
    networking = client.NetworkingV1Api(api_client)
    with enforcing_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("iso", job_args(pool, claim, 2, script_args=("0", "hold")))
        worker = jobs.wait_for("iso-worker-0", lambda p: any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in p.get("status", {}).get("conditions", [])),
            READY_TIMEOUT_S)
        jobs.wait_for("iso-chief", lambda p: p.get("status", {}).get("phase") == "Running", READY_TIMEOUT_S)
        policies = networking.list_namespaced_network_policy(namespace, label_selector=names.job_selector("iso"))
        assert sorted(p.metadata.name for p in policies.items) == ["iso-manager", "iso-pods"]
        # Another job's pod, on the worker's node and on the other one.
        other_job = names.job_labels("other", names.ROLE_WORKER, "uid-other")
        start_pods(jobs, [plain_pod(f"other-{logical}", pool.node(logical), other_job, ["sleep", "300"])
                          for logical in ("a", "b")])
        address = worker["status"]["podIP"]
        # The control: the job's own chief reaches the worker's sshd.
        assert verdict(cluster, namespace, "iso-chief", address, DEFAULT_PORT, connected=True,
                       container=names.ROLE_CHIEF) == "connected"
        for logical in ("a", "b"):
            refused = verdict(cluster, namespace, f"other-{logical}", address, DEFAULT_PORT, connected=False)
            assert refused.startswith("not connected"), (logical, refused)
        release_ranks(tmp_path)
        assert jobs.exit_code("iso") == 0, jobs.report("iso")
        jobs.wait_gone(["iso-worker-0"])  # the chief is kept for its logs
        left = networking.list_namespaced_network_policy(namespace, label_selector=names.job_selector("iso"))
        assert left.items == []
        assert jobs.secrets("iso-") == []
