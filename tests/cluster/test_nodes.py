"""The local cluster's nodes: pods run, report and die as on any kubelet's node.

The nodes are the upstream kubelet with containerd; these tests show the local cluster
gives them what a real node has (images from the registry, a network, volumes,
credentials). Every test works in its own namespace (deleted afterwards, which deletes
its pods) on two nodes of one group started for this module. Containers run from the
project's images (built by `make setup`); their processes are found on the host
by a unique marker in their command line, so the tests can check that deleting
a pod really kills everything it started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from localcluster import leftovers, netsetup, registry
from localcluster.components import APISERVER_PORT
from harness.polling import poll_until
from roughness import create_pod, read_pod
from localcluster.cluster import Cluster
from localcluster.podman import podman

pytestmark = pytest.mark.cluster

NODE_LABEL = "distributetrain.test/node-tests"
# Generous: other test sessions may share this 2-core host.
POD_START_TIMEOUT_S = 60
POD_FINISH_TIMEOUT_S = 60
POD_GONE_TIMEOUT_S = 60
PROBE_TIMEOUT_S = 60
RESTART_TIMEOUT_S = 60
MANY_PODS = 64
MANY_PODS_TIMEOUT_S = 180
LEASE_TIMEOUT_S = 40  # the kubelet renews its Lease every 10 s
# The training image has a shell, Python, sleep and iproute2; the manager image has the
# Kubernetes client and runs as 65532.
IMAGE = "distributetrain/base:0.1.0"
MANAGER_IMAGE = "distributetrain/manager:0.1.0"
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class TestNodes:
    names: tuple[str, str]
    ips: dict[str, str]
    taint: dict

    def index(self, name: str) -> int:
        return int(self.ips[name].rsplit(".", 1)[1]) - 10


@pytest.fixture(scope="module")
def nodes(cluster, api_client) -> Iterator[TestNodes]:
    prefix = "nt" + uuid.uuid4().hex[:5]
    names = (f"{prefix}-a", f"{prefix}-b")
    # The taint keeps other sessions' pods off these nodes.
    taint = {"key": NODE_LABEL, "value": prefix, "effect": "NoSchedule"}
    group = cluster.add_nodes({names[0]: 4, names[1]: 2}, labels={NODE_LABEL: prefix},
                              taints=[f"{NODE_LABEL}={prefix}:NoSchedule"])
    try:
        core = client.CoreV1Api(api_client)
        ips = {}
        for name in names:
            addresses = core.read_node(name).status.addresses
            ips[name] = next(a.address for a in addresses if a.type == "InternalIP")
        yield TestNodes(names, ips, taint)
    finally:
        group.stop()


@pytest.fixture
def core(api_client) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


# --- helpers -------------------------------------------------------------------




def marker() -> str:
    """A `sleep` argument no other process on the host has."""
    return f"{90000 + uuid.uuid4().int % 9999}.{uuid.uuid4().int % 10**6:06d}"


def processes_with(text: str) -> list[int]:
    result = subprocess.run(["pgrep", "-f", f"sleep {text}"], capture_output=True, text=True)
    return [int(pid) for pid in result.stdout.split()]


def pod_manifest(name: str, node: str, command: list[str], restart_policy: str = "Never", **spec) -> dict:
    container = {"name": "main", "image": IMAGE, "command": command}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **spec.pop("metadata", {})},
        "spec": {
            "restartPolicy": restart_policy,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 5,
            "containers": [container],
            **spec,
        },
    }






def wait_phase(core, namespace: str, name: str, phases: tuple[str, ...], timeout_s: float = POD_START_TIMEOUT_S) -> dict:
    def reached():
        pod = read_pod(core, namespace, name)
        return pod if pod and pod.get("status", {}).get("phase") in phases else None

    return poll_until(reached, timeout_s, f"pod {namespace}/{name} to be {'/'.join(phases)}")


def wait_gone(core, namespace: str, name: str, timeout_s: float = POD_GONE_TIMEOUT_S) -> None:
    poll_until(lambda: read_pod(core, namespace, name) is None, timeout_s, f"pod {namespace}/{name} to be deleted")


def condition(pod: dict, kind: str) -> str | None:
    return next((c["status"] for c in pod.get("status", {}).get("conditions") or [] if c["type"] == kind), None)


def container_status(pod: dict, name: str = "main") -> dict:
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == name)


def logs(core, namespace: str, name: str, container: str = "main") -> str:
    return core.read_namespaced_pod_log(name, namespace, container=container)


def sh(script: str) -> list[str]:
    return ["sh", "-c", textwrap.dedent(script).strip()]


# --- tests ---------------------------------------------------------------------


def test_nodes_are_registered_like_kubelets(core, nodes):
    node = json.loads(core.read_node(nodes.names[0], _preload_content=False).data)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node["status"]["capacity"]["pods"] == "110"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == nodes.names[0]
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    assert condition(node, "Ready") == "True"
    assert node["spec"]["taints"] == [nodes.taint]
    # A kubelet creates its heartbeat Lease some seconds after the node is Ready (its lease
    # controller's first try may precede the Node): here ten.
    leases = client.CoordinationV1Api(core.api_client)
    lease = poll_until(lambda: leases.list_namespaced_lease(
        "kube-node-lease", field_selector=f"metadata.name={nodes.names[0]}").items, LEASE_TIMEOUT_S,
        f"node {nodes.names[0]}'s Lease in kube-node-lease")[0]
    assert lease.spec.holder_identity == nodes.names[0]


def test_exit_codes_and_reasons_are_reported(core, namespace, nodes):
    manifest = pod_manifest("exits", nodes.names[0], sh("echo bye; exit 3"))
    manifest["spec"]["containers"].append({"name": "fine", "image": IMAGE, "command": ["true"]})
    create_pod(core, namespace, manifest)
    pod = wait_phase(core, namespace, "exits", ("Failed", "Succeeded"), POD_FINISH_TIMEOUT_S)
    assert pod["status"]["phase"] == "Failed"
    failed = container_status(pod)["state"]["terminated"]
    assert (failed["exitCode"], failed["reason"]) == (3, "Error")
    assert container_status(pod, "fine")["state"]["terminated"]["reason"] == "Completed"
    assert pod["status"]["podIP"].startswith(f"10.233.{nodes.index(nodes.names[0])}.")
    assert pod["status"]["hostIP"] == nodes.ips[nodes.names[0]]
    assert condition(pod, "Ready") == "False"


def test_tcp_readiness_probe_flips_ready(core, namespace, nodes):
    manifest = pod_manifest(
        "web", nodes.names[0], sh("sleep 3; exec python -m http.server 8080"),
        container={"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}},
    )
    create_pod(core, namespace, manifest)
    pod = wait_phase(core, namespace, "web", ("Running",))
    assert condition(pod, "Ready") == "False", "ready before anything listened"
    poll_until(lambda: condition(read_pod(core, namespace, "web"), "Ready") == "True", PROBE_TIMEOUT_S, "web Ready")
    assert container_status(read_pod(core, namespace, "web"))["ready"] is True


def test_exec_readiness_probe_runs_inside_the_pod(core, namespace, nodes):
    # /tmp is private to the container: the host's /tmp has no such file.
    manifest = pod_manifest(
        "flag", nodes.names[1], sh(f"touch /tmp/ready; sleep 4; rm /tmp/ready; exec sleep {marker()}"),
        container={"readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]},
                                      "periodSeconds": 1, "failureThreshold": 1}},
    )
    create_pod(core, namespace, manifest)
    poll_until(lambda: condition(read_pod(core, namespace, "flag"), "Ready") == "True", PROBE_TIMEOUT_S, "Ready")
    poll_until(lambda: condition(read_pod(core, namespace, "flag"), "Ready") == "False", PROBE_TIMEOUT_S, "not Ready")


def test_failing_liveness_probe_restarts_the_container(core, namespace, nodes):
    # Serves until /tmp/alive (private to each container run) disappears after 3 s.
    script = "touch /tmp/alive; (sleep 3; rm /tmp/alive) & exec python -m http.server 8080"
    manifest = pod_manifest(
        "lively", nodes.names[1], sh(script), restart_policy="Always",
        container={
            "livenessProbe": {"exec": {"command": ["test", "-f", "/tmp/alive"]}, "periodSeconds": 1,
                              "failureThreshold": 1},
            "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
        },
    )
    create_pod(core, namespace, manifest)
    poll_until(lambda: condition(read_pod(core, namespace, "lively"), "Ready") == "True", PROBE_TIMEOUT_S, "Ready")
    poll_until(lambda: container_status(read_pod(core, namespace, "lively"))["restartCount"] >= 1, RESTART_TIMEOUT_S,
             "a restart after the liveness probe failed")
    last = container_status(read_pod(core, namespace, "lively"))["lastState"]["terminated"]
    assert last["exitCode"] in (137, 143)


def test_secret_files_have_their_modes_inside_the_pod(core, namespace, nodes):
    core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="ssh"), string_data={"id_rsa": "PRIVATE", "authorized_keys": "PUBLIC"},
    ))
    script = """
        cd /etc/ssh-keys
        stat -L -c '%n %a %U' id_rsa authorized_keys
        cat id_rsa; echo
        touch new 2>/dev/null || echo read-only
    """
    manifest = pod_manifest(
        "keys", nodes.names[0], sh(script),
        # As root, whom the kubelet makes the files' owner: the base image's own user is the
        # job's (uid 1000), which mode 0600 keeps out.
        container={"volumeMounts": [{"name": "keys", "mountPath": "/etc/ssh-keys"}],
                   "securityContext": {"runAsUser": 0}},
        volumes=[{"name": "keys", "secret": {"secretName": "ssh", "defaultMode": 0o400,
                                             "items": [{"key": "id_rsa", "path": "id_rsa", "mode": 0o600},
                                                       {"key": "authorized_keys", "path": "authorized_keys"}]}}],
    )
    create_pod(core, namespace, manifest)
    wait_phase(core, namespace, "keys", ("Succeeded",), POD_FINISH_TIMEOUT_S)
    assert logs(core, namespace, "keys").splitlines() == [
        "id_rsa 600 root", "authorized_keys 400 root", "PRIVATE", "read-only",
    ]


def test_pod_waits_for_a_missing_secret_and_says_why(core, namespace, nodes):
    manifest = pod_manifest(
        "patient", nodes.names[0], ["cat", "/etc/creds/token"],
        container={"volumeMounts": [{"name": "creds", "mountPath": "/etc/creds"}]},
        volumes=[{"name": "creds", "secret": {"secretName": "late"}}],
    )
    create_pod(core, namespace, manifest)

    def failed_mount_events() -> list[str]:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=patient").items
        return [e.message for e in events if e.reason == "FailedMount" and e.source.component == "kubelet"]

    # On a loaded host the kubelet's first try may time out syncing its cache of Secrets
    # ("failed to sync secret cache"); a later one says the Secret is missing.
    poll_until(lambda: any('secret "late" not found' in message for message in failed_mount_events()),
               POD_START_TIMEOUT_S, lambda: f'a FailedMount event saying secret "late" not found: {failed_mount_events()}')
    # The kubelet records the event before its next status sync writes the container's
    # state (seconds apart on a loaded host): wait for the status, not for the event alone.
    pod = poll_until(lambda: (lambda p: p if p["status"].get("containerStatuses") else None)(
        read_pod(core, namespace, "patient")), POD_START_TIMEOUT_S, "the container's status")
    assert pod["status"]["phase"] == "Pending"
    assert container_status(pod)["state"]["waiting"]["reason"] == "ContainerCreating"
    core.create_namespaced_secret(namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="late"),
                                                             string_data={"token": "finally"}))
    wait_phase(core, namespace, "patient", ("Succeeded",), POD_FINISH_TIMEOUT_S)
    assert logs(core, namespace, "patient") == "finally"


def test_deleting_a_pod_kills_all_its_processes(core, namespace, nodes):
    escaped, grace_s = marker(), 2
    # The shell ignores SIGTERM, so only SIGKILL after the grace period ends it;
    # the setsid'd sleep leaves the process group, as sshd's sessions do.
    script = f"trap '' TERM; setsid sleep {escaped} & while true; do sleep 1; done"
    manifest = pod_manifest("stubborn", nodes.names[1], sh(script), terminationGracePeriodSeconds=grace_s)
    create_pod(core, namespace, manifest)
    wait_phase(core, namespace, "stubborn", ("Running",))
    poll_until(lambda: processes_with(escaped), POD_START_TIMEOUT_S, "the escaped sleep to start")
    started = time.monotonic()
    core.delete_namespaced_pod("stubborn", namespace)
    wait_gone(core, namespace, "stubborn")
    assert time.monotonic() - started >= grace_s - 0.5, "killed before the grace period ended"
    assert processes_with(escaped) == []


def test_pods_on_two_nodes_reach_each_other(core, namespace, nodes):
    create_pod(core, namespace, pod_manifest(
        "server", nodes.names[0], ["python", "-m", "http.server", "8080"],
        container={"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}},
    ))
    server = poll_until(
        lambda: (p := read_pod(core, namespace, "server")) and condition(p, "Ready") == "True" and p,
        PROBE_TIMEOUT_S, "server Ready",
    )
    address = server["status"]["podIP"]
    script = f"""
        import socket, urllib.request
        print(socket.gethostname())
        print(urllib.request.urlopen("http://{address}:8080/", timeout=5).status)
    """
    create_pod(core, namespace, pod_manifest("client", nodes.names[1], ["python", "-c", textwrap.dedent(script)]))
    wait_phase(core, namespace, "client", ("Succeeded",), POD_FINISH_TIMEOUT_S)
    assert logs(core, namespace, "client").split() == ["client", "200"]


# Lower than any MAC the kernel gives a veth (those are locally administered: 02 and up).
LOW_MAC = "00:00:5e:00:53:01"
REACH_TIMEOUT_S = 3


@pytest.mark.exclusive
def test_a_node_keeps_reaching_the_apiserver_when_another_node_leaves_the_bridge(nodes):
    """A node that joins with the lowest MAC, then leaves, must not take the host's address
    with it. A Linux bridge left to itself takes its lowest port's MAC: the nodes that
    learnt it lost the apiserver until their ARP entry expired, and went NotReady."""
    netns = netsetup.node_netns(nodes.index(nodes.names[0]))
    ip("link", "add", "dtlow", "address", LOW_MAC, "type", "veth", "peer", "name", "dtlowpeer")
    try:
        ip("link", "set", "dtlow", "master", netsetup.BRIDGE_NAME, "up")
        ip("-n", netns, "neigh", "flush", "to", netsetup.HOST_IP)  # the node learns the host's MAC now
        assert reaches_the_apiserver(netns)
    finally:
        ip("link", "delete", "dtlow")
    assert reaches_the_apiserver(netns), f"{netns} lost {netsetup.HOST_IP}: {ip('-n', netns, 'neigh').stdout}"


def ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True, timeout=30)


def reaches_the_apiserver(netns: str) -> bool:
    connect = f"import socket; socket.create_connection(({netsetup.HOST_IP!r}, {APISERVER_PORT}), timeout={REACH_TIMEOUT_S})"
    return subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", connect],
                          capture_output=True, timeout=30).returncode == 0


IN_CLUSTER_SCRIPT = """
import os
from kubernetes import client, config
config.load_incluster_config()
core = client.CoreV1Api()
for what, call in (("pod", lambda: core.read_namespaced_pod(os.environ["POD"], os.environ["NS"])),
                   ("nodes", core.list_node)):
    try:
        call()
        print(what, "ok")
    except client.ApiException as error:
        print(what, error.status)
"""


def test_in_cluster_config_works_with_the_projected_token(core, namespace, nodes, api_client):
    rbac = client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader")))
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody")))
    rbac.create_namespaced_role(namespace, client.V1Role(
        metadata=client.V1ObjectMeta(name="pod-reader"),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get"])],
    ))
    rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="pod-reader"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)],
    ))
    env = [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    for account in ("reader", "nobody"):
        create_pod(core, namespace, pod_manifest(
            account, nodes.names[0], ["python", "-c", IN_CLUSTER_SCRIPT], serviceAccountName=account,
            container={"env": env, "image": MANAGER_IMAGE},
        ))
    for account in ("reader", "nobody"):
        wait_phase(core, namespace, account, ("Succeeded",), POD_FINISH_TIMEOUT_S)
    assert logs(core, namespace, "reader").splitlines() == ["pod ok", "nodes 403"]
    assert logs(core, namespace, "nobody").splitlines() == ["pod 403", "nodes 403"]


def test_kubectl_logs_returns_the_output(cluster, core, namespace, nodes):
    create_pod(core, namespace, pod_manifest("talker", nodes.names[1], sh("echo line-1; echo line-2 >&2; sleep 2; echo line-3")))
    wait_phase(core, namespace, "talker", ("Running",))
    followed = cluster.kubectl("logs", "-f", "-n", namespace, "talker")
    assert followed.returncode == 0, followed.stderr
    # stdout and stderr are two streams: the runtime orders lines written at once either way.
    assert sorted(followed.stdout.splitlines()[:2]) == ["line-1", "line-2"]
    assert followed.stdout.splitlines()[2:] == ["line-3"]
    wait_phase(core, namespace, "talker", ("Succeeded",), POD_FINISH_TIMEOUT_S)
    tail = cluster.kubectl("logs", "--tail=1", "--timestamps", "-n", namespace, "talker")
    assert tail.returncode == 0, tail.stderr
    stamp, text = tail.stdout.strip().split(" ", 1)
    assert text == "line-3" and stamp.endswith("Z")


def test_garbage_collector_deletes_pods_of_a_deleted_owner(core, namespace, nodes):
    owner = core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner")))
    running = marker()
    manifest = pod_manifest("owned", nodes.names[0], ["sleep", running], metadata={"ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}]})
    create_pod(core, namespace, manifest)
    wait_phase(core, namespace, "owned", ("Running",))
    # Running is reported once runc started the process, an instant before it execs `sleep`.
    poll_until(lambda: processes_with(running), POD_START_TIMEOUT_S, "the container's process")
    core.delete_namespaced_config_map("owner", namespace)
    wait_gone(core, namespace, "owned")
    assert processes_with(running) == []


def test_killed_container_restarts_under_on_failure(cluster, core, namespace, nodes):
    running = marker()
    # The emptyDir outlives the container, so each run can tell which one it is.
    script = f'echo "attempt $(ls /data | wc -l)"; touch /data/$$; exec sleep {running}'
    create_pod(core, namespace, pod_manifest(
        "manager", nodes.names[0], sh(script), restart_policy="OnFailure",
        container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]}, volumes=[{"name": "data", "emptyDir": {}}],
    ))
    wait_phase(core, namespace, "manager", ("Running",))
    (pid,) = poll_until(lambda: processes_with(running), POD_START_TIMEOUT_S, "the container's process")
    os.kill(pid, signal.SIGKILL)

    def restarted():
        pod = read_pod(core, namespace, "manager")
        status = container_status(pod)
        # The kubelet may first report the new run with lastState {} (kubernetes#101044: the
        # killed run's record not read yet from the runtime), then the killed run's end.
        return (status if status["restartCount"] == 1 and "running" in status["state"]
                and "terminated" in status["lastState"] else None)

    status = poll_until(restarted, RESTART_TIMEOUT_S, "the container to run again, its killed run's end reported")
    assert status["lastState"]["terminated"]["exitCode"] == 137
    assert read_pod(core, namespace, "manager")["status"]["phase"] == "Running"
    poll_until(lambda: len(processes_with(running)) == 1, POD_START_TIMEOUT_S, "the new run's process")
    poll_until(lambda: logs(core, namespace, "manager") == "attempt 1\n", POD_START_TIMEOUT_S, "the new run's log")
    previous = cluster.kubectl("logs", "--previous", "-n", namespace, "manager")
    assert previous.stdout == "attempt 0\n", previous.stderr


def test_failing_init_container_fails_the_pod(core, namespace, nodes):
    manifest = pod_manifest("init-fails", nodes.names[1], ["true"],
                            initContainers=[{"name": "fetch", "image": IMAGE, "command": ["sh", "-c", "exit 7"]}])
    create_pod(core, namespace, manifest)
    pod = wait_phase(core, namespace, "init-fails", ("Failed", "Succeeded"), POD_FINISH_TIMEOUT_S)
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 7
    assert container_status(pod)["state"] == {"waiting": {"reason": "PodInitializing"}}


def test_active_deadline_fails_the_pod(core, namespace, nodes):
    running = marker()
    create_pod(core, namespace, pod_manifest("slow", nodes.names[1], ["sleep", running], activeDeadlineSeconds=2))
    pod = wait_phase(core, namespace, "slow", ("Failed",), POD_FINISH_TIMEOUT_S)
    assert pod["status"]["reason"] == "DeadlineExceeded"
    assert processes_with(running) == []


def test_environment_and_downward_api(core, namespace, nodes):
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg"),
                                                                    data={"MODE": "fast"}))
    script = "echo $POD_NAME $NODE $MODE $HOSTNAME $KUBERNETES_SERVICE_HOST; cat /etc/info/labels; echo; echo $1"
    manifest = pod_manifest(
        "env", nodes.names[0], ["sh", "-c", script, "sh", "$(POD_NAME)-$(MODE)"],
        metadata={"labels": {"role": "worker"}},
        container={
            "envFrom": [{"configMapRef": {"name": "cfg"}}],
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "volumeMounts": [{"name": "info", "mountPath": "/etc/info"}],
        },
        volumes=[{"name": "info", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}],
    )
    create_pod(core, namespace, manifest)
    wait_phase(core, namespace, "env", ("Succeeded",), POD_FINISH_TIMEOUT_S)
    assert logs(core, namespace, "env").splitlines() == [
        f"env {nodes.names[0]} fast env {netsetup.KUBERNETES_SERVICE_IP}", 'role="worker"', "env-fast",
    ]


def test_host_network_pod_uses_the_node_address(core, namespace, nodes):
    node = nodes.names[1]
    create_pod(core, namespace, pod_manifest("hostnet", node, sh("hostname; ip -4 -o addr show eth0"), hostNetwork=True))
    pod = wait_phase(core, namespace, "hostnet", ("Succeeded",), POD_FINISH_TIMEOUT_S)
    assert pod["status"]["podIP"] == pod["status"]["hostIP"] == nodes.ips[node]
    name, address = logs(core, namespace, "hostnet").splitlines()
    assert name == node and f"inet {nodes.ips[node]}/16" in address


@pytest.mark.exclusive
def test_pods_keep_running_across_an_apiserver_restart(cluster, core, namespace, nodes):
    before = marker()
    create_pod(core, namespace, pod_manifest("before", nodes.names[0], ["sleep", before]))
    wait_phase(core, namespace, "before", ("Running",))
    cluster.restart_apiserver()
    create_pod(core, namespace, pod_manifest("after", nodes.names[1], ["true"]))
    wait_phase(core, namespace, "after", ("Succeeded",), POD_FINISH_TIMEOUT_S)
    assert read_pod(core, namespace, "before")["status"]["phase"] == "Running"
    core.delete_namespaced_pod("before", namespace)
    wait_gone(core, namespace, "before")
    assert processes_with(before) == []
    assert condition(json.loads(core.read_node(nodes.names[0], _preload_content=False).data), "Ready") == "True"


def test_sixty_four_pods_run_at_once_and_are_cleaned_up(cluster, core, namespace, nodes, capsys):
    running = marker()
    started = time.monotonic()
    for number in range(MANY_PODS):
        create_pod(core, namespace, pod_manifest(f"many-{number}", nodes.names[number % 2], ["sleep", running]))
    created_s = time.monotonic() - started

    def phases() -> dict[str, int]:
        items = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]
        counts: dict[str, int] = {}
        for pod in items:
            phase = pod.get("status", {}).get("phase", "?")
            counts[phase] = counts.get(phase, 0) + 1
        return counts

    poll_until(lambda: phases().get("Running") == MANY_PODS, MANY_PODS_TIMEOUT_S, f"{MANY_PODS} pods Running")
    running_s = time.monotonic() - started
    items = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]
    addresses = {pod["status"]["podIP"] for pod in items}
    assert len(addresses) == MANY_PODS
    poll_until(lambda: len(processes_with(running)) == MANY_PODS, POD_START_TIMEOUT_S, "every pod's process")

    deleting = time.monotonic()
    core.delete_collection_namespaced_pod(namespace)
    poll_until(lambda: not phases(), MANY_PODS_TIMEOUT_S, "every pod to be deleted")
    deleted_s = time.monotonic() - deleting
    assert processes_with(running) == []
    # containerd keeps a pod's network namespace mounted under the node's state while it runs.
    netns = [point for name in nodes.names for point in leftovers.mounts_under(
        cluster.layout.nodes / f"n{nodes.index(name)}") if "/netns/" in point]
    assert netns == [], "pod network namespaces left behind"
    with capsys.disabled():
        print(f"\n[nodes] {MANY_PODS} pods: created in {created_s:.1f}s, all Running after {running_s:.1f}s, "
              f"all deleted {deleted_s:.1f}s after delete")


def test_stopping_a_node_kills_its_pods_and_removes_it(cluster, core, namespace, api_client):
    name = "nt" + uuid.uuid4().hex[:5] + "-stop"
    group = cluster.add_nodes({name: 1})
    try:
        running = marker()
        manifest = pod_manifest("orphan", name, ["sleep", running])
        manifest["spec"]["tolerations"] = []
        create_pod(core, namespace, manifest)
        wait_phase(core, namespace, "orphan", ("Running",))
    finally:
        group.stop()
    assert processes_with(running) == []
    left = leftovers.find_nodes(cluster.layout, group.record.indices())
    assert left.empty(), f"left behind by the stopped node: {left}"
    with pytest.raises(client.ApiException) as gone:
        core.read_node(name)
    assert gone.value.status == 404
    with pytest.raises(client.ApiException) as lease_gone:
        client.CoordinationV1Api(api_client).read_namespaced_lease(name, "kube-node-lease")
    assert lease_gone.value.status == 404


MANY_NODES = 18  # past the 16 nodes the host's inotify default allowed


def test_a_host_runs_many_nodes_at_once(cluster, core):
    """Every node's containerd serves its CRI with many nodes on the host (the control-plane
    benchmark runs 65). With the host's default of 128 inotify instances, the 17th node's
    containerd started without its CRI service and the node never came up."""
    prefix = "nt" + uuid.uuid4().hex[:5]
    group = cluster.add_nodes({f"{prefix}-{index:02d}": 1 for index in range(MANY_NODES)},
                              labels={NODE_LABEL: prefix})
    try:
        listed = core.list_node(label_selector=f"{NODE_LABEL}={prefix}").items
        ready = [node.metadata.name for node in listed
                 if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)]
        assert len(ready) == MANY_NODES, f"Ready: {sorted(ready)}"
    finally:
        group.stop()


# --- images, as the kubelet runs them ----------------------------------------


def waiting(pod: dict) -> dict:
    return container_status(pod)["state"].get("waiting") or {}


@pytest.mark.parametrize("policy, reason, message", [
    ("Never", "ErrImageNeverPull", 'Container image "distributetrain/absent:1" is not present with pull policy of Never'),
    ("IfNotPresent", "ErrImagePull", 'failed to pull and unpack image "docker.io/distributetrain/absent:1"'),
])
def test_absent_image_leaves_the_container_waiting(core, namespace, nodes, policy, reason, message):
    create_pod(core, namespace, pod_manifest("absent", nodes.names[0], ["true"],
                                         container={"image": "distributetrain/absent:1", "imagePullPolicy": policy}))
    pod = poll_until(lambda: (p := read_pod(core, namespace, "absent")) and p.get("status", {}).get("containerStatuses")
                   and waiting(p).get("reason") in (reason, "ImagePullBackOff") and p, POD_START_TIMEOUT_S, reason)
    assert pod["status"]["phase"] == "Pending"
    if waiting(pod)["reason"] == reason:
        assert message in waiting(pod)["message"]


def test_missing_executable_is_a_start_error(core, namespace, nodes):
    create_pod(core, namespace, pod_manifest("noexec", nodes.names[1], ["no-such-command"]))
    pod = wait_phase(core, namespace, "noexec", ("Failed",), POD_FINISH_TIMEOUT_S)
    terminated = container_status(pod)["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("StartError", 128)
    assert 'exec: "no-such-command": executable file not found in $PATH' in terminated["message"]
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=noexec").items
    assert any(e.reason == "Failed" and "executable file not found" in e.message for e in events)


def test_image_entrypoint_user_env_and_workdir_apply(core, namespace, nodes):
    # The manager image: ENTRYPOINT manager.sh, USER 65532, python on the image's PATH.
    script = "id -u; id -g; pwd; echo $PATH; echo $FROM_POD"
    create_pod(core, namespace, pod_manifest("as-image", nodes.names[0], ["sh", "-c", script], container={
        "image": MANAGER_IMAGE, "workingDir": "/tmp", "env": [{"name": "FROM_POD", "value": "pod"}]}))
    create_pod(core, namespace, pod_manifest("as-asked", nodes.names[0], ["id", "-u"], container={
        "image": MANAGER_IMAGE, "securityContext": {"runAsUser": 4242}}))
    # args alone keep the image's ENTRYPOINT (manager.sh prints pre-training's help).
    manifest = pod_manifest("entrypoint", nodes.names[1], [], container={"image": MANAGER_IMAGE, "args": ["--help"]})
    del manifest["spec"]["containers"][0]["command"]
    create_pod(core, namespace, manifest)
    for name in ("as-image", "as-asked", "entrypoint"):
        wait_phase(core, namespace, name, ("Succeeded",), POD_FINISH_TIMEOUT_S)
    uid, gid, workdir, path, from_pod = logs(core, namespace, "as-image").splitlines()
    # The kubelet passes the image's user to the runtime as runAsUser alone, so the image's
    # group (USER 65532:65532) gives way to the uid's group in /etc/passwd: none here, so 0.
    assert (uid, gid, workdir, from_pod) == ("65532", "0", "/tmp", "pod")
    assert path.startswith("/usr/local/bin:")
    assert logs(core, namespace, "as-asked").strip() == "4242"
    assert logs(core, namespace, "entrypoint").startswith("usage: distributetrain pre-training")


def test_pods_see_their_image_not_the_host(core, namespace, nodes):
    # Neither the checkout nor the host's virtualenv exist inside a container.
    script = f"test -e {REPO}/pyproject.toml && echo checkout; test -e {os.environ.get('DT_VENV', '/nonexistent')} " \
             "&& echo venv; test -e /opt/distributetrain/train.py && echo image; cat /etc/os-release | head -1"
    create_pod(core, namespace, pod_manifest("isolated", nodes.names[1], ["sh", "-c", script]))
    wait_phase(core, namespace, "isolated", ("Succeeded",), POD_FINISH_TIMEOUT_S)
    assert logs(core, namespace, "isolated").splitlines()[0] == "image"


def test_memory_emptydir_is_a_tmpfs_of_its_size_limit(core, namespace, nodes):
    create_pod(core, namespace, pod_manifest(
        "shm", nodes.names[0], ["sh", "-c", "df -k /dev/shm | tail -1; grep ' /dev/shm ' /proc/mounts"],
        container={"volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]},
        volumes=[{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "96Mi"}}],
    ))
    wait_phase(core, namespace, "shm", ("Succeeded",), POD_FINISH_TIMEOUT_S)
    usage, mount = logs(core, namespace, "shm").splitlines()
    assert usage.split()[1] == str(96 * 1024)
    assert mount.split()[2] == "tmpfs"


@pytest.mark.exclusive
def test_a_node_runs_the_image_its_tag_names_now(cluster, core, namespace, nodes):
    """An image rebuilt under the same tag, as `make setup` rebuilds this project's: a node
    that pulled the old build runs the new one once it is published (IfNotPresent, the
    default for a tag, would otherwise keep running the old build from the node's store,
    which outlives the node)."""
    reference = f"distributetrain/retag-{uuid.uuid4().hex[:6]}:1"
    qualified = registry.qualified(f"localhost/{reference}")
    node = nodes.names[0]

    def run_on_node(name: str) -> str:
        create_pod(core, namespace, pod_manifest(name, node, ["sh", "-c", "true"], container={"image": reference}))
        return container_status(wait_phase(core, namespace, name, ("Succeeded",), POD_FINISH_TIMEOUT_S))["imageID"]

    try:
        podman(["tag", IMAGE, reference], check=True)
        Cluster.up(layout=cluster.layout)  # publishes
        first_digest = registry.digest_of(qualified)
        assert run_on_node("first").endswith(f"@{first_digest}")

        podman(["tag", MANAGER_IMAGE, reference], check=True)  # the tag now names another image
        Cluster.up(layout=cluster.layout)
        rebuilt_digest = registry.digest_of(qualified)
        assert rebuilt_digest not in (None, first_digest)
        assert run_on_node("rebuilt").endswith(f"@{rebuilt_digest}")
    finally:
        podman(["rmi", "--ignore", reference], check=False)
        registry.unpublish(qualified)
