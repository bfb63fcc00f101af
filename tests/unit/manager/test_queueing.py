"""A job with --queue on an in-memory API: its attempt created as one gated pod group,
Queued until Kueue's gates go, then placed from the inventory at admission."""

import re
import threading

import pytest

from distributetrain.core import errors, names
from distributetrain.core.placement import inventory, kueuenodes, placement, podstate, topology
from distributetrain.core.pods import podgroup
from distributetrain.core.settings import JobSettings
from distributetrain.kube import events
from distributetrain.core.clock import FakeClock
from distributetrain.manager.placement import freegpus, queueing
from distributetrain.manager.job import lifecycle
from distributetrain.manager.placement.kinds import StaticJob
from harness.builders import TIME_SLICED, ledger_of, make_pod, node, sized_node, tenant
from harness.events import FakeEventsApi
from harness.kube import FakeKube
from harness.waiting import WatchedClock, wait_until
from test_lifecycle_story import ended, free_port, running

KUEUE_GATES = [{"name": "kueue.x-k8s.io/admission"}, {"name": "kueue.x-k8s.io/topology"}]
SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=3, image="reg/base:1", owner_uid="uid-1",
                       queue="team-a", worker_ready_timeout_s=30.0,
                       discovery_url=f"http://127.0.0.1:{free_port()}/hosts")


def kueue(kube, timeout_s):
    """Kueue, as far as these stories need it, at each pod watch: the pods of an evicted
    workload go (it deleted them), a complete group waiting for admission is admitted;
    otherwise the watch plays the story's next script."""
    stopped = [name for name, pod in kube.pods.items() if podstate.evicted_by_kueue(pod)]
    gated = sorted(name for name, pod in kube.pods.items() if not podgroup.is_admitted(pod))
    if stopped:
        for name in stopped:
            yield kube.apply("DELETED", kube.pods[name])
    elif gated:
        for name in gated:
            yield kube.apply(*admitted(kube, name))
    else:
        yield from kube.play_next_script(timeout_s)


def kueue_gates(obj):
    """Kueue's mutating webhook on a pod that names a queue."""
    if obj["kind"] == "Pod" and podgroup.QUEUE_LABEL in obj["metadata"].get("labels", {}):
        obj["spec"]["schedulingGates"] = obj["spec"].get("schedulingGates", []) + KUEUE_GATES


def admitted(kube, name, node_selector=None, tolerations=(), domain=None):
    """The pod once Kueue admitted its group: Kueue's gates removed, the job's left; with
    its flavor's node labels and tolerations, and its topology ``domain``, as Kueue adds them."""
    pod = kube.pods[name]
    spec = pod["spec"] | {"schedulingGates": [{"name": podgroup.PLACEMENT_GATE}]}
    metadata = pod["metadata"]
    if node_selector or domain:
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), **(node_selector or {}), **(domain or {})}
    if tolerations:
        spec["tolerations"] = [*spec.get("tolerations", []), *tolerations]
    if domain:
        metadata = metadata | {"annotations": {**metadata.get("annotations", {}),
                                               "kueue.x-k8s.io/podset-unconstrained-topology": "true"}}
    return "MODIFIED", pod | {"spec": spec, "metadata": metadata}


def kueue_admitting_into(flavor, domains=None):
    """Kueue admitting a complete group into ``flavor`` (a ResourceFlavor); with
    ``domains`` ({pod: node selector}), its topology assignment of each pod too."""

    def story(kube, timeout_s):
        gated = sorted(name for name, pod in kube.pods.items() if not podgroup.is_admitted(pod))
        if not gated:
            yield from kube.play_next_script(timeout_s)
        spec = flavor.get("spec") or {}
        for name in gated:
            yield kube.apply(*admitted(kube, name, spec.get("nodeLabels"), spec.get("tolerations", ()),
                                       (domains or {}).get(name)))

    return story


@pytest.fixture
def queued_story(monkeypatch, tmp_path):
    api = FakeEventsApi()
    monkeypatch.setattr(events, "EventsApi", lambda api_client, clock: api)
    monkeypatch.setattr("distributetrain.manager.reporting.reporting.TERMINATION_LOG", str(tmp_path / "termination-log"))
    monkeypatch.setattr("distributetrain.manager.watching.podwaits.WORKER_STATUS_LAG_S", 0.3)
    monkeypatch.setattr(freegpus, "waiting_client", lambda same: same)  # free GPUs followed on the fake itself
    kube = FakeKube([node("a", 2), node("b", 1), node("c", 4)])
    kube.on_create.append(kueue_gates)
    kube.on_pod_watch = kueue
    kube.custom[("localqueues", "ml", "team-a")] = {"spec": {"clusterQueue": "gpus"}}
    kube.custom[("clusterqueues", None, "gpus")] = {"spec": {"resourceGroups": [{"flavors": [
        {"name": "default", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]}]}]}}
    return kube, api


def other_team_on(node_name, gpus):
    return make_pod(f"other-team-{node_name}").uid(node_name).on(node_name).gpus(gpus).obj()


def test_a_queued_attempt_is_one_gated_group_placed_at_admission(queued_story):
    kube, api = queued_story
    kube.pods["other-team-c"] = other_team_on("c", 4)  # the pods' shares: 2 and 1, on the GPUs free now

    def meanwhile(kube, timeout_s):
        # While queued, node c frees up and node a fills; then Kueue admits the group.
        kube.on_pod_watch = kueue
        del kube.pods["other-team-c"]
        kube.pods["other-team-a"] = other_team_on("a", 2)
        yield from kueue(kube, timeout_s)

    kube.on_pod_watch = meanwhile
    kube.pod_watches = [[("demo-worker-0", running()), ("demo-chief", running(ip="10.0.0.3"))],
                        [("demo-chief", ended(0))]]
    code = lifecycle.execute(kube, SETTINGS, "run", kube.clock)
    assert code == 0, [e["note"] for e in api.created]
    reasons = [e["reason"] for e in api.created]
    assert reasons[:2] == ["Queued", "Planned"] and reasons[-1] == "Succeeded"
    assert api.created[0]["note"] == "3 GPUs as one workload of 2 pods (2, 1 GPUs) in queue team-a"
    # Placed at admission, from the inventory then: a is full, so the 2-GPU pod goes to c.
    assert kube.annotation_history(names.ANNOTATION_PLAN) == ["c=2,b=1"]
    assert kube.annotation_history(names.ANNOTATION_PHASE)[0] == "Queued"
    creates = [(verb, name) for verb, kind, name in kube.actions if kind == "Pod" and verb in ("create", "patch")]
    # The manager pod labelled for its NetworkPolicy, the pods created, then each pinned and un-gated.
    assert creates == [("patch", "demo"), ("create", "demo-worker-0"), ("create", "demo-chief"),
                       ("patch", "demo-worker-0"), ("patch", "demo-worker-0"),
                       ("patch", "demo-chief"), ("patch", "demo-chief")]
    assert len(kube.annotation_history(names.ANNOTATION_BOOKED_AT)) == 1  # the fence under the Lease, at admission


def test_at_admission_a_queued_job_s_shares_go_to_the_tightest_rack_that_holds_them(queued_story):
    kube, api = queued_story
    rack = "network.topology.kubernetes.io/rack"
    for name, value in (("a", "r1"), ("b", "r2"), ("c", "r2")):
        kube.nodes[name]["metadata"]["labels"][rack] = value
    kube.pods["other-team-c"] = other_team_on("c", 4)  # the shares, 2 and 1, are planned on a and b

    def meanwhile(kube, timeout_s):
        kube.on_pod_watch = kueue
        del kube.pods["other-team-c"]  # c frees up while queued: rack r2 (b, c) holds both pods now
        yield from kueue(kube, timeout_s)

    kube.on_pod_watch = meanwhile
    kube.pod_watches = [[("demo-worker-0", running()), ("demo-chief", running(ip="10.0.0.3"))],
                        [("demo-chief", ended(0))]]
    code = lifecycle.execute(kube, SETTINGS.replace(topology=topology.parse(rack)), "run", kube.clock)
    assert code == 0, [e["note"] for e in api.created]
    assert kube.annotation_history(names.ANNOTATION_PLAN) == ["c=2,b=1"]  # topology-blind: a=2,b=1
    assert api.created[1]["note"] == "admitted by queue team-a; c=2,b=1 in rack r2 (the chief's share last)"
    assert kube.annotation_history(names.ANNOTATION_DOMAINS) == ["rack r2"]


def test_queued_pods_are_created_unpinned_and_placed_pinned(queued_story):
    kube, _ = queued_story
    kube.pods["other-team-c"] = other_team_on("c", 4)
    snapshots = {}
    create = kube.create_all_owned

    def remember(objs):
        created = create(objs)
        snapshots.update({o["metadata"]["name"]: o for o in created})
        return created

    kube.create_all_owned = remember

    kube.pod_watches = [[("demo-worker-0", running()), ("demo-chief", running(ip="10.0.0.3"))],
                        [("demo-chief", ended(0))]]
    assert lifecycle.execute(kube, SETTINGS, "run", kube.clock) == 0
    first = snapshots["demo-worker-0"]
    assert inventory.pinned_node(first["spec"]) is None
    assert [g["name"] for g in first["spec"]["schedulingGates"]] == [podgroup.PLACEMENT_GATE, *(g["name"] for g in KUEUE_GATES)]
    assert re.fullmatch(r"demo-r0-[0-9a-f]{4}", first["metadata"]["labels"][podgroup.GROUP_LABEL])


@pytest.mark.parametrize("settings, flag, says", [
    (SETTINGS.replace(queue="team-b"), "--queue", "no LocalQueue 'team-b' in namespace 'ml'"),
    (SETTINGS.replace(num_gpus=5), "--num-gpus", "requested 5 GPUs but queue team-a's ClusterQueue gpus admits 4 at most"),
])
def test_a_queue_that_could_never_admit_the_job_is_bad_input_and_nothing_is_created(queued_story, settings, flag, says):
    kube, api = queued_story
    assert lifecycle.execute(kube, settings, "run", kube.clock) == 2
    assert api.created[-1]["note"] == f"{flag}: {says} (exit code 2)"
    assert kube.writes("create", "Pod") == [] and kube.writes("create", "Secret") == []


PREEMPTED = {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted",
             "message": "Preempted to accommodate a workload (UID: u) due to prioritization in the ClusterQueue"}


def preempted(kube, name):
    """Kueue's stop of an evicted workload's pod: its condition, then the deletion."""
    pod = kube.pods[name]
    status = pod["status"] | {"conditions": [*pod["status"].get("conditions", []), PREEMPTED]}
    return "MODIFIED", pod | {"status": status,
                              "metadata": pod["metadata"] | {"deletionTimestamp": "2026-01-02T12:00:00Z"}}


STARTED = [("demo-worker-0", running()), ("demo-chief", running(ip="10.0.0.3"))]


def test_a_preempted_job_without_restarts_ends_with_its_own_exit_code(queued_story):
    kube, api = queued_story
    kube.pods["other-team-c"] = other_team_on("c", 4)
    kube.pod_watches = [STARTED, [lambda kube: preempted(kube, "demo-chief")]]
    assert lifecycle.execute(kube, SETTINGS, "run", kube.clock) == 72
    failed = api.created[-1]
    assert failed["reason"] == "Failed" and "Kueue: Preempted to accommodate a workload" in failed["note"], failed
    # Nothing of the job's is left but what Kueue is deleting.
    assert {name for name, pod in kube.pods.items() if "deletionTimestamp" not in pod["metadata"]} == {"other-team-c"}


def test_a_preempted_job_with_a_restart_goes_back_to_the_queue(queued_story, monkeypatch):
    monkeypatch.setattr("distributetrain.core.job.restarts.RESTART_BACKOFF_S", 0.01)
    kube, api = queued_story

    # The first attempt: the chief alone on c; preempted while it trains.
    kube.pod_watches = [[("demo-chief", running(ip="10.0.0.3"))], [lambda kube: preempted(kube, "demo-chief")],
                        [("demo-chief-r1", running(ip="10.0.0.3"))], [("demo-chief-r1", ended(0))]]
    assert lifecycle.execute(kube, SETTINGS.replace(max_restarts=1), "run", kube.clock) == 0
    reasons = [e["reason"] for e in api.created]
    assert reasons.count("Queued") == 2 and "Restarting" in reasons and reasons[-1] == "Succeeded", reasons
    # Queued again as a new group, placed at its own admission.
    assert kube.annotation_history(names.ANNOTATION_PLAN) == ["c=3", "c=3"]


def test_where_kueue_manages_every_pod_a_job_without_a_queue_is_refused_naming_the_flag(queued_story):
    kube, api = queued_story

    def kueue_manages_every_pod(obj):  # manageJobsWithoutQueueName, for this namespace
        if obj["kind"] == "Pod":
            obj["spec"]["schedulingGates"] = obj["spec"].get("schedulingGates", []) + KUEUE_GATES

    kube.on_create = [kueue_manages_every_pod]
    assert lifecycle.execute(kube, SETTINGS.replace(queue=""), "run", kube.clock) == 2
    # The very refusal ``submit`` makes (tests/unit/cli/test_jobs_flows.py), docs/kueue.md's.
    assert api.created[-1]["note"] == ("--queue: Kueue queues every pod in namespace 'ml': "
                                       "name the job's LocalQueue, --queue=NAME (exit code 2)")
    assert kube.writes("create") == []


def test_a_manager_restarted_while_queued_adopts_its_group_and_places_it_at_admission(queued_story):
    kube, api = queued_story
    kube.pods["other-team-c"] = other_team_on("c", 4)

    def killed_while_queued(kube, timeout_s):
        raise KeyboardInterrupt  # the manager's process ends while the group waits
        yield

    kube.on_pod_watch = killed_while_queued
    with pytest.raises(KeyboardInterrupt):
        lifecycle.execute(kube, SETTINGS, "pre-training", kube.clock)
    group = {name: pod["metadata"]["labels"][podgroup.GROUP_LABEL] for name, pod in kube.pods.items()
             if name.startswith("demo-")}
    assert sorted(group) == ["demo-chief", "demo-worker-0"] and len(set(group.values())) == 1

    # The manager again (its container restarted): the same group, admitted now, placed then.
    kube.on_pod_watch = kueue
    kube.pod_watches = [[("demo-worker-0", running()), ("demo-chief", running(ip="10.0.0.3"))],
                        [("demo-chief", ended(0))]]
    before = len(kube.writes("create", "Pod"))
    assert lifecycle.execute(kube, SETTINGS, "run", kube.clock) == 0, [e["note"] for e in api.created]
    assert len(kube.writes("create", "Pod")) == before, "the queued group was created again"
    assert kube.pods["demo-chief"]["metadata"]["labels"][podgroup.GROUP_LABEL] == group["demo-chief"]
    assert kube.annotation_history(names.ANNOTATION_PLAN) == ["a=2,b=1"]



def test_queued_shares_are_what_each_node_could_give_the_job_s_pods_once_the_queue_drains():
    nodes = [sized_node("a", 4, cpu="4"), sized_node("b", 4), sized_node("s", 8, labels=TIME_SLICED)]
    everything_taken = [tenant(name, gpus=gpus) for name, gpus in (("a", 4), ("b", 4), ("s", 8))]
    ledger = ledger_of(nodes, everything_taken)
    assert ledger.free() == {"a": 0, "b": 0, "s": 0}
    # a's 4 CPUs hold a pod of 2 GPUs at 2 CPUs each; the time-sliced node one rank.
    assert queueing.shares(ledger, 7, StaticJob()) == [4, 2, 1]
    assert queueing.shares(ledger_of(nodes), 7, StaticJob()) == [4, 2, 1]
    with pytest.raises(placement.InsufficientGPUs, match="requested 8 GPUs but only 7"):
        queueing.shares(ledger, 8, StaticJob())


POOL = "example.com/pool"
DEDICATED = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
FLAVOR = {"metadata": {"name": "ml"}, "spec": {"nodeLabels": {POOL: "ml"}, "tolerations": [DEDICATED]}}


def flavored_nodes():
    """a and b are the flavor's, labelled and tainted for it; c, free and untainted, is not."""
    nodes = [node("a", 2, labels={POOL: "ml"}), node("b", 1, labels={POOL: "ml"}), node("c", 4)]
    for flavored in nodes[:2]:
        flavored["spec"]["taints"] = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    return nodes


def queue_of(kube, flavor):
    kube.custom[("clusterqueues", None, "gpus")] = {"spec": {"resourceGroups": [{
        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
        "flavors": [{"name": flavor["metadata"]["name"],
                     "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]}]}]}}
    kube.custom[("resourceflavors", None, flavor["metadata"]["name"])] = flavor


def test_a_job_queued_into_a_flavor_is_planned_and_placed_on_the_flavor_s_nodes(queued_story):
    kube, api = queued_story
    kube.nodes = {n["metadata"]["name"]: n for n in flavored_nodes()}
    queue_of(kube, FLAVOR)
    kube.on_pod_watch = kueue_admitting_into(FLAVOR)
    kube.pod_watches = [[("demo-worker-0", running()), ("demo-chief", running(ip="10.0.0.3"))],
                        [("demo-chief", ended(0))]]
    placed = {}
    patch = kube.patch
    kube.patch = lambda kind, namespace, name, body: placed.setdefault(name, patch(kind, namespace, name, body))
    assert lifecycle.execute(kube, SETTINGS, "run", kube.clock) == 0, [e["note"] for e in api.created]
    # Shares on the flavor's tainted nodes, not all on c: the pods run where Kueue put them.
    assert api.created[0]["note"] == "3 GPUs as one workload of 2 pods (2, 1 GPUs) in queue team-a"
    assert kube.annotation_history(names.ANNOTATION_PLAN) == ["a=2,b=1"]
    for name, node_name in (("demo-worker-0", "a"), ("demo-chief", "b")):  # Kueue's selector and the pin both hold
        spec = placed[name]["spec"]
        assert (inventory.pinned_node(spec), spec["nodeSelector"]) == (node_name, {POOL: "ml"})
        assert DEDICATED in spec["tolerations"]


def test_under_topology_aware_scheduling_each_pod_is_pinned_to_the_node_kueue_assigned_it(queued_story):
    kube, api = queued_story
    kube.nodes = {name: node(name, 2, labels={POOL: "ml"}) for name in ("a", "b")}
    queue_of(kube, {"metadata": {"name": "tas"}, "spec": {"nodeLabels": {POOL: "ml"}, "topologyName": "default"}})
    # 2 GPUs, one pod; the tightest fit by name would be a, Kueue's topology assignment says b.
    kube.on_pod_watch = kueue_admitting_into(kube.custom[("resourceflavors", None, "tas")],
                                             {"demo-chief": {"kubernetes.io/hostname": "b"}})
    kube.pod_watches = [[("demo-chief", running(ip="10.0.0.3"))], [("demo-chief", ended(0))]]
    assert lifecycle.execute(kube, SETTINGS.replace(num_gpus=2), "run", kube.clock) == 0, [e["note"] for e in api.created]
    assert kube.annotation_history(names.ANNOTATION_PLAN) == ["b=2"]


def test_a_pod_kueue_assigned_a_node_whose_gpus_are_taken_is_never_placed_elsewhere(queued_story, monkeypatch):
    kube, api = queued_story
    kube.nodes = {name: node(name, 2) for name in ("a", "b")}
    kube.on_pod_watch = kueue_admitting_into({}, {"demo-chief": {"kubernetes.io/hostname": "b"}})

    def meanwhile(kube, timeout_s):  # another team takes b while the job is queued
        kube.pods["other-team-b"] = other_team_on("b", 2)
        kube.on_pod_watch = kueue_admitting_into({}, {"demo-chief": {"kubernetes.io/hostname": "b"}})
        yield from kube.on_pod_watch(kube, timeout_s)

    kube.on_pod_watch = meanwhile
    assert lifecycle.execute(kube, SETTINGS.replace(num_gpus=2, worker_ready_timeout_s=0.3), "run", kube.clock) == 69
    assert "no nodes hold its pods now on the nodes Kueue allows them (kubernetes.io/hostname=b)" in \
        api.created[-1]["note"], api.created[-1]["note"]
    assert "demo-chief" not in kube.pods or not podgroup.is_placed(kube.pods["demo-chief"])


def test_flavors_the_manager_may_not_read_leave_the_job_queued_on_its_own_view(queued_story, caplog):
    kube, api = queued_story
    queue_of(kube, FLAVOR)
    kube.failures["read ResourceFlavor"] = [errors.forbidden('resourceflavors.kueue.x-k8s.io "ml" is forbidden')]
    kube.pods["other-team-c"] = other_team_on("c", 4)
    kube.pod_watches = [[("demo-worker-0", running()), ("demo-chief", running(ip="10.0.0.3"))],
                        [("demo-chief", ended(0))]]
    assert lifecycle.execute(kube, SETTINGS, "run", kube.clock) == 0, [e["note"] for e in api.created]
    assert "cannot read ResourceFlavor ml" in caplog.text


def test_without_kueue_s_api_a_queued_job_is_bad_input_naming_the_flag(queued_story):
    kube, api = queued_story
    kube.kueue_served = None
    assert lifecycle.execute(kube, SETTINGS, "run", kube.clock) == 2
    assert api.created[-1]["note"] == ("--queue: the cluster serves no Kueue LocalQueues (kueue.x-k8s.io): install "
                                       "Kueue, or submit without --queue (exit code 2)")
    assert kube.writes("create", "Pod") == []


@pytest.mark.parametrize("host_network, code, plan", [(False, 0, ["a=2,a=1"]), (True, 69, [])])
def test_two_pods_kueue_s_topology_assignment_put_on_one_node_go_there_unless_their_ports_collide(
        queued_story, monkeypatch, host_network, code, plan):
    kube, api = queued_story
    kube.nodes = {"a": node("a", 4), "b": node("b", 1)}
    kube.pods["other-team-a"] = other_team_on("a", 2)  # the shares: 2 on a, 1 on b
    on_a = {"kubernetes.io/hostname": "a"}

    def meanwhile(kube, timeout_s):  # a frees up while queued; Kueue packs both pods there
        del kube.pods["other-team-a"]
        kube.on_pod_watch = kueue_admitting_into({}, {"demo-worker-0": on_a, "demo-chief": on_a})
        yield from kube.on_pod_watch(kube, timeout_s)

    kube.on_pod_watch = meanwhile
    kube.pod_watches = [[("demo-worker-0", running()), ("demo-chief", running(ip="10.0.0.3"))],
                        [("demo-chief", ended(0))]]
    settings = SETTINGS.replace(host_network=host_network, worker_ready_timeout_s=0.3)
    assert lifecycle.execute(kube, settings, "run", kube.clock) == code, [e["note"] for e in api.created]
    assert api.created[0]["note"] == "3 GPUs as one workload of 2 pods (2, 1 GPUs) in queue team-a"
    assert kube.annotation_history(names.ANNOTATION_PLAN) == plan


def test_queued_shares_are_planned_on_the_first_flavor_whose_nodes_hold_them():
    x1, x2, y = (sized_node(name, gpus, labels={POOL: pool}) for name, gpus, pool in (("x1", 1, "x"), ("x2", 1, "x"),
                                                                                       ("y", 4, "y")))
    ledger = ledger_of([x1, x2, y])
    x_flavor, y_flavor = (kueuenodes.flavor_rule({"spec": {"nodeLabels": {POOL: pool}}}, ()) for pool in "xy")
    assert queueing.shares(ledger, 2, StaticJob(), [x_flavor, y_flavor]) == [1, 1]  # x's, tried first
    assert queueing.shares(ledger, 3, StaticJob(), [x_flavor, y_flavor]) == [3]  # x cannot hold 3: y's
    assert queueing.shares(ledger, 2, StaticJob()) == [2]  # no flavor known: the whole cluster's tightest plan
    with pytest.raises(placement.InsufficientGPUs):
        queueing.shares(ledger, 5, StaticJob(), [x_flavor, y_flavor])


def placement_lease_writes(kube) -> int:
    return kube.writes(kind="Lease").count(names.LOCK_LEASE_NAME)


def test_admitted_but_short_of_gpus_a_queued_job_takes_the_lease_only_to_book(monkeypatch, tmp_path):
    """Kueue holds the group back, then admits it while other teams hold every GPU: no
    Lease and no list while it is held back, one booking that finds nothing free, then
    nothing while nothing changes (the free GPUs followed), and one more booking once
    GPUs free up. Time stands still meanwhile (a fake clock): a job that looked again on
    a timer would take the Lease over and over."""
    api = FakeEventsApi()
    monkeypatch.setattr(events, "EventsApi", lambda api_client, clock: api)
    monkeypatch.setattr("distributetrain.manager.reporting.reporting.TERMINATION_LOG", str(tmp_path / "termination-log"))
    monkeypatch.setattr(freegpus, "waiting_client", lambda same: same)  # followed on the fake itself
    kube = FakeKube([node("a", 2), node("b", 1), node("c", 4)], clock=WatchedClock())
    kube.on_create.append(kueue_gates)
    kube.custom[("localqueues", "ml", "team-a")] = {"spec": {"clusterQueue": "gpus"}}
    for name, gpus in (("a", 2), ("b", 1), ("c", 4)):
        kube.pods[f"other-team-{name}"] = other_team_on(name, gpus)
    held_back = {"watches": 0, "lease_writes": None, "node_lists": None}

    def story(kube, timeout_s):
        if held_back["watches"] < 5:  # Kueue holds the group back for five watches, a minute each
            held_back["watches"] += 1
            kube.clock.sleep(60)
            return
        if held_back["lease_writes"] is None:
            held_back["lease_writes"], held_back["node_lists"] = placement_lease_writes(kube), kube.node_lists
            kube.on_pod_watch = kueue
        yield from kueue(kube, timeout_s)

    failures = []

    def free_gpus_once_followed():
        try:
            # The booking that found nothing free (the shares' inventory, the survey), then
            # the free GPUs followed (their lists, then their watches): from then on nothing
            # is taken or listed.
            wait_until(lambda: placement_lease_writes(kube) == 2 and kube.node_lists == 3 and kube.cluster_pod_watches,
                       kube.changes, 20, "a booking that found nothing free, then the free GPUs followed")
            frozen_at = (placement_lease_writes(kube), kube.node_lists, kube.pod_lists)
            wait_until(lambda: kube.clock.waiters() > 0, kube.clock.changes, 20, "the job waiting for GPUs")
            assert (placement_lease_writes(kube), kube.node_lists, kube.pod_lists) == frozen_at
            kube.remove(kube.pods["other-team-c"])
        except BaseException as e:  # noqa: BLE001 - reported in the test's thread
            failures.append(e)
            kube.clock.advance(3600)  # the job's wait ends: the test fails, it does not hang

    kube.on_pod_watch = story
    kube.pod_watches = [[("demo-chief", running(ip="10.0.0.3"))], [("demo-chief", ended(0))]]
    freeing = threading.Thread(target=free_gpus_once_followed, daemon=True)
    freeing.start()
    code = lifecycle.execute(kube, SETTINGS, "run", kube.clock)
    freeing.join(5)
    assert not failures, failures
    assert code == 0, [e["note"] for e in api.created]
    assert held_back == {"watches": 5, "lease_writes": 0, "node_lists": 1}  # the shares' inventory only
    assert placement_lease_writes(kube) == 4  # two bookings: each took the Lease and let it go
    assert kube.annotation_history(names.ANNOTATION_PLAN) == ["c=3"]
