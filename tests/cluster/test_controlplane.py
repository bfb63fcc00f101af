"""The local control plane behaves like a real cluster, and `down` leaves nothing.

The `cluster` tests run against the real upstream apiserver, controller-manager
and scheduler: RBAC is enforced, the garbage collector and namespace controller
work, the scheduler schedules, and `python -m localcluster down` removes every
process, namespace, interface and mount (and the cached `up` is fast). The
unmarked tests check the launcher's pure parts (node bookkeeping, names) and
need neither root nor a cluster.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client

from clusterfixtures import SessionRegistry, namespace_name
from harness.polling import poll_until
from localcluster import components, hostnetwork, leftovers, netsetup, processes
from localcluster.cluster import Cluster
from localcluster.layout import RunLayout
from localcluster.nodegroups import NodeAllocationError, NodeGroupRegistry, parse_node_spec

GC_TIMEOUT_S = 60.0
NAMESPACE_DELETION_TIMEOUT_S = 60.0
SCHEDULING_TIMEOUT_S = 30.0
NODE_GROUP_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.2
CACHED_UP_BUDGET_S = 30.0
CLI_TIMEOUT_S = 300.0
# `python -m localcluster` runs from the checkout's root, as scripts/test.sh and users run it.
REPO_ROOT = Path(__file__).resolve().parents[2]
SLEEPER_IMAGE = "python:3.11.10-slim-bookworm"


def not_found(read) -> bool:
    try:
        read()
    except client.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


@pytest.mark.cluster
def test_rbac_denies_service_account_without_rights(cluster: Cluster, api_client, namespace: str):
    core = client.CoreV1Api(api_client)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody")))
    token = core.create_namespaced_service_account_token(
        "nobody", namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    ).status.token
    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:6443"
    configuration.ssl_ca_cert = str(cluster.layout.pki / "ca.crt")
    configuration.api_key = {"authorization": f"Bearer {token}"}
    with client.ApiClient(configuration) as as_nobody:
        with pytest.raises(client.ApiException) as denied:
            client.CoreV1Api(as_nobody).list_namespaced_pod(namespace)
    # 403, not 401: the projected token authenticates, RBAC refuses.
    assert denied.value.status == 403


@pytest.mark.cluster
def test_garbage_collector_deletes_dependents_of_deleted_owner(api_client, namespace: str):
    core = client.CoreV1Api(api_client)
    owner = core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner")))
    reference = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid)
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dependent", owner_references=[reference]))
    )
    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")
    poll_until(
        lambda: not_found(lambda: core.read_namespaced_config_map("dependent", namespace)),
        GC_TIMEOUT_S,
        "the dependent ConfigMap deleted by the garbage collector",
        POLL_INTERVAL_S,
    )


@pytest.mark.cluster
def test_namespace_controller_finishes_deletion(api_client):
    core = client.CoreV1Api(api_client)
    name = f"t-ns-deletion-{os.getpid()}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    core.create_namespaced_config_map(name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="content")))
    core.delete_namespace(name)
    poll_until(lambda: not_found(lambda: core.read_namespace(name)), NAMESPACE_DELETION_TIMEOUT_S,
               f"namespace {name} gone", POLL_INTERVAL_S)


@pytest.mark.cluster
def test_scheduler_reports_unschedulable_pod(api_client, namespace: str):
    core = client.CoreV1Api(api_client)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="needs-a-node"),
        spec=client.V1PodSpec(
            node_selector={"distributetrain.test/no-such-node": "true"},
            containers=[client.V1Container(name="main", image="distributetrain/base:0.1.0", command=["true"])],
        ),
    )
    core.create_namespaced_pod(namespace, pod)

    def unschedulable() -> bool:
        conditions = core.read_namespaced_pod("needs-a-node", namespace).status.conditions or []
        return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions)

    poll_until(unschedulable, SCHEDULING_TIMEOUT_S, "the pod marked Unschedulable by the scheduler", POLL_INTERVAL_S)


@pytest.mark.exclusive
@pytest.mark.cluster
def test_restarted_apiserver_serves_the_same_data(cluster: Cluster, api_client, namespace: str):
    core = client.CoreV1Api(api_client)
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="survivor"), data={"k": "v"})
    )
    cluster.restart_apiserver()
    assert core.read_namespaced_config_map("survivor", namespace).data == {"k": "v"}


STORAGE_LIST_TRIES = 5


def cache_and_storage_lists(cluster: Cluster, resource: str) -> tuple[float, float]:
    """The apiserver's count of LISTs of ``resource`` served from its watch cache, and of
    those (or their current-revision reads) that went to etcd."""
    metrics = cluster.kubectl("get", "--raw", "/metrics")
    assert metrics.returncode == 0, metrics.stderr

    def total(name: str) -> float:
        pattern = rf'^{name}\{{[^}}]*resource="{resource}"[^}}]*\}} (\S+)$'
        return sum(float(value) for value in re.findall(pattern, metrics.stdout, re.MULTILINE))

    return total("apiserver_cache_list_total"), total("apiserver_storage_list_total")


@pytest.mark.cluster
def test_consistent_paged_lists_are_served_from_the_watch_cache(cluster: Cluster, api_client, namespace: str):
    """As on a real 1.34 cluster, whose etcd answers progress requests: the manager's
    inventory pages through every pod, and each page from the cache costs etcd nothing
    but a revision read (the first); with Debian's etcd 3.4 every page went to etcd."""
    core = client.CoreV1Api(api_client)
    for index in range(3):
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"c{index}")))
    # The counts are the whole API server's: another test's namespace being deleted lists
    # its ConfigMaps from etcd meanwhile (full15: 6 such lists). A next page read from etcd
    # would show in every try; a neighbour's list only in some.
    stored_by_the_next_page = []
    for _ in range(STORAGE_LIST_TRIES):
        cached_before, _ = cache_and_storage_lists(cluster, "configmaps")
        first = core.list_namespaced_config_map(namespace, limit=2)  # consistent: no resourceVersion
        cached_first, stored_first = cache_and_storage_lists(cluster, "configmaps")
        rest = core.list_namespaced_config_map(namespace, limit=2, _continue=first.metadata._continue)
        cached_rest, stored_rest = cache_and_storage_lists(cluster, "configmaps")
        assert {"c0", "c1", "c2"} <= {m.metadata.name for m in first.items + rest.items}
        assert cached_first - cached_before >= 1, "the first page did not come from the watch cache"
        assert cached_rest - cached_first >= 1, "the next page did not come from the watch cache"
        stored_by_the_next_page.append(stored_rest - stored_first)
        if stored_rest == stored_first:
            break
    assert 0 in stored_by_the_next_page, f"the next page was read from etcd: {stored_by_the_next_page} lists"


@pytest.mark.cluster
def test_kubectl_talks_to_the_cluster(cluster: Cluster):
    result = cluster.kubectl("get", "--raw", "/readyz")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.exclusive
@pytest.mark.cluster
def test_node_group_registers_ready_gpu_nodes_and_removes_them(cluster: Cluster, api_client):
    core = client.CoreV1Api(api_client)
    with cluster.add_nodes({"cp-gpu-a": 2, "cp-gpu-b": 1}, labels={"pool": "cp"}) as group:
        nodes = {name: core.read_node(name) for name in group.names}
        assert nodes["cp-gpu-a"].status.allocatable["nvidia.com/gpu"] == "2"
        assert nodes["cp-gpu-b"].metadata.labels["pool"] == "cp"
    for name in ("cp-gpu-a", "cp-gpu-b"):
        poll_until(lambda: not_found(lambda: core.read_node(name)), NODE_GROUP_TIMEOUT_S, f"node {name} deleted",
                   POLL_INTERVAL_S)
    assert not hostnetwork.cluster_netns()


@pytest.mark.cluster
def test_stopping_a_node_whose_daemons_were_killed_removes_what_it_left(cluster: Cluster, api_client, namespace):
    """The machine's power cut: kubelet, containerd and kube-proxy SIGKILLed under a running
    pod; its container and containerd's shim run on, and stopping the group kills them."""
    core = client.CoreV1Api(api_client)
    group = cluster.add_nodes({"cp-killed": 1})
    run_sleeper(core, namespace, "cp-killed")
    for pid in group.daemon_pids():
        os.kill(pid, signal.SIGKILL)
    left = leftovers.find_nodes(cluster.layout, group.record.indices())
    assert left.cgroups and left.pids, f"nothing ran on the node: {left}"
    group.stop()
    assert not_found(lambda: core.read_node("cp-killed"))
    left = leftovers.find_nodes(cluster.layout, group.record.indices())
    assert left.empty(), f"left behind by the killed node: {left}"


def run_sleeper(core: client.CoreV1Api, namespace: str, node: str) -> None:
    """A pod running on `node`, once it runs."""
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=f"sleeper-{node}"),
        spec=client.V1PodSpec(node_name=node, restart_policy="Never", termination_grace_period_seconds=0,
                              containers=[client.V1Container(name="main", image=SLEEPER_IMAGE,
                                                             command=["sleep", "3600"])]))
    core.create_namespaced_pod(namespace, pod)
    poll_until(lambda: core.read_namespaced_pod(pod.metadata.name, namespace).status.phase == "Running",
               SCHEDULING_TIMEOUT_S, f"pod {pod.metadata.name} running", POLL_INTERVAL_S)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localcluster", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False,
    )


@pytest.mark.exclusive
@pytest.mark.cluster
def test_down_leaves_nothing_and_cached_up_is_fast(cluster: Cluster, api_client, capsys: pytest.CaptureFixture[str]):
    """Script level: `down` then `up` through the CLI; the session's cluster is up again after.

    A node's daemons are killed first, as a crash would, and an orphan Node is left,
    so `down` has to clean up after both. `--keep-state`: the session's objects (its
    namespaces, a ConfigMap here) come back with the next `up`.
    """
    if SessionRegistry(cluster.layout).others_alive():
        pytest.skip("another pytest session is using this cluster; not taking it down under it")
    crashed = cluster.add_nodes({"cp-crashed": 1})
    for pid in crashed.daemon_pids():
        os.kill(pid, signal.SIGKILL)
    # A Node no agent knows of, as an agent killed in an earlier run leaves.
    client.CoreV1Api(api_client).create_node(client.V1Node(metadata=client.V1ObjectMeta(name="cp-orphan")))
    kept = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cp-kept-across-down"))
    client.CoreV1Api(api_client).create_namespaced_config_map("default", kept)

    try:
        down = run_cli("down", "--keep-state")
        assert down.returncode == 0, cli_output(down)
        left = leftovers.find(cluster.layout)
        assert left.empty(), f"left behind after down: {left}\n{cli_output(down)}"
        assert "removed leftovers" not in down.stdout, f"components did not stop cleanly:\n{cli_output(down)}"

        started = time.monotonic()
        up = run_cli("up")
        elapsed_s = time.monotonic() - started
        assert up.returncode == 0, cli_output(up)
    finally:
        # Whatever failed above, the session's cluster is up for the tests after this one.
        Cluster.up(layout=cluster.layout)
    with capsys.disabled():
        print(f"\n[localcluster] up with cached binaries: {elapsed_s:.1f} s")
    assert elapsed_s < CACHED_UP_BUDGET_S
    assert cluster.probe().ready()
    for name in ("cp-crashed", "cp-orphan"):
        assert not_found(lambda: client.CoreV1Api(api_client).read_node(name))
    client.CoreV1Api(api_client).delete_namespaced_config_map("cp-kept-across-down", "default")  # 404 if not kept


@pytest.mark.exclusive
@pytest.mark.cluster
def test_up_after_a_run_killed_outright_removes_what_it_left(cluster: Cluster, api_client):
    """Every process of the run SIGKILLed, as the end of a CI job or a sandbox session
    does: `up` removes the dead node's cgroups, namespaces, veths and Nodes before
    starting, so the new run neither collides with them nor has `down` report them later."""
    if SessionRegistry(cluster.layout).others_alive():
        pytest.skip("another pytest session is using this cluster; not killing it under it")
    killed = cluster.add_nodes({"cp-killed": 1})
    indices = list(killed.record.indices())
    # Slow pulls in a form this version does not read (another version's run wrote it).
    cluster.layout.pull_delays_file.write_text(json.dumps({"example/image:1": {"cp-killed": 30}}))
    try:
        for pid in [*killed.daemon_pids(), *(processes.read_pid(cluster.layout.pid_file(name))
                                             for name in components.COMPONENTS)]:
            processes.kill(pid, "a process of the run", 15.0)
        assert not leftovers.find_nodes(cluster.layout, indices).empty(), "the kill left nothing to remove"

        up = run_cli("up")
        assert up.returncode == 0, cli_output(up)
        assert "removed what a killed earlier run left" in up.stderr, cli_output(up)
        left = leftovers.find_nodes(cluster.layout, indices)
        assert left.empty(), f"the killed node's leftovers survived `up`: {left}"
        assert [g.record.group_id for g in cluster.node_groups()].count(killed.record.group_id) == 0
        assert not_found(lambda: client.CoreV1Api(api_client).read_node("cp-killed"))
        assert not cluster.layout.pull_delays_file.exists(), "the earlier run's slow pulls outlived `up`"
    finally:
        Cluster.up(layout=cluster.layout)


def cli_output(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-6000:]}"

def test_node_groups_get_disjoint_contiguous_indices_and_reuse_freed_ones(tmp_path):
    registry = NodeGroupRegistry(RunLayout(tmp_path))
    first = registry.allocate(["a-0", "a-1", "a-2"])
    second = registry.allocate(["b-0"])
    assert (list(first.indices()), list(second.indices())) == ([1, 2, 3], [4])
    registry.release(first.group_id)
    assert list(registry.allocate(["c-0", "c-1"]).indices()) == [1, 2]
    assert list(registry.allocate(["d-0", "d-1"]).indices()) == [5, 6]


def test_node_names_are_unique_across_groups(tmp_path):
    registry = NodeGroupRegistry(RunLayout(tmp_path))
    registry.allocate(["gpu-a"])
    with pytest.raises(NodeAllocationError, match="gpu-a"):
        registry.allocate(["gpu-b", "gpu-a"])


def test_node_indices_run_out_at_240(tmp_path):
    registry = NodeGroupRegistry(RunLayout(tmp_path))
    registry.allocate([f"n-{i}" for i in range(netsetup.NODE_INDEX_MAX - 1)])
    with pytest.raises(NodeAllocationError, match="consecutive free"):
        registry.allocate(["x-0", "x-1"])
    assert list(registry.allocate(["x-0"]).indices()) == [netsetup.NODE_INDEX_MAX]


def test_node_spec_parsing_shows_the_format_on_error():
    assert parse_node_spec("gpu-a=4, gpu-b=2") == ({"gpu-a": 4, "gpu-b": 2}, {})
    with pytest.raises(ValueError, match=r"NAME\[/HOSTNAME\]=GPUS\[,\.\.\.\], e\.g\. gpu-a=4,"):
        parse_node_spec("gpu-a:4")


def test_agent_owned_names_map_to_their_node_index():
    names = ["dt-n3", "dtn3", "dt-p3-17", "dtv3-17", "dtbr0", "dt-other"]
    assert [netsetup.node_index_of(name) for name in names] == [3, 3, 3, 3, None, None]
    assert netsetup.node_ip(1) == "10.233.0.11"


@pytest.mark.parametrize("test_name", ["test_x[param-1]", "T" * 200, "___"])
def test_namespace_names_are_dns_labels(test_name):
    name = namespace_name(test_name)
    assert len(name) <= 63
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
