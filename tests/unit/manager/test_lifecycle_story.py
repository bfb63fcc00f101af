"""A whole job (pre- and post-training) on an in-memory API: the Events it records on
the manager pod, in order, and what it says about pods that wait."""

import functools
import json
import socket
import time

import pytest

from distributetrain.core import errors, names
from distributetrain.core.placement import inventory, topology
from distributetrain.core.pods import podsecurity
from distributetrain.core.clock import FakeClock, RealClock
from distributetrain.core.job.record import JobRecord
from distributetrain.core.settings import JobSettings
from distributetrain.kube import events
from distributetrain.manager.placement import clusterview, journal
from distributetrain.manager.job import ending, job, lifecycle, posttraining, pretraining
from distributetrain.manager.watching import podwaits, startwatch
from distributetrain.manager.watching import teardown
from harness.builders import node
from harness.events import FakeEventsApi
from harness.kube import FakeKube


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="reg/base:1", owner_uid="uid-1",
                       worker_ready_timeout_s=30.0, discovery_url=f"http://127.0.0.1:{free_port()}/hosts")
UNSCHEDULABLE = ("0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: "
                 "0/2 nodes are available: 2 Preemption is not helpful for scheduling.")


def running(ready=True, ip="10.0.0.2"):
    return {"phase": "Running", "podIP": ip, "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True" if ready else "False"}]}


PULLING = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
           "containerStatuses": [{"name": "chief", "state": {"waiting": {"reason": "ContainerCreating"}}}]}


def ended(code):
    return {"phase": "Succeeded" if code == 0 else "Failed", "podIP": "10.0.0.3",
            "containerStatuses": [{"name": "chief", "state": {"terminated": {"exitCode": code}}}]}


UNSCHEDULED = {"phase": "Pending", "conditions": [
    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}]}


def refusing_events(list_pages):
    """``list_pages`` as RBAC without ``events: list`` answers it."""

    def listed(kind, namespace=None, **selectors):
        if kind == "Event":
            raise errors.Forbidden('events is forbidden: cannot list resource "events" in API group ""')
        return list_pages(kind, namespace, **selectors)

    return listed


@pytest.fixture
def story(monkeypatch, tmp_path):
    """Runs a job on nodes a=1, b=1; returns (reason, type, note) of every Event, in order.
    Its windows and deadlines are of a fake clock (``story.clock``) the job's pod watch moves."""
    api = FakeEventsApi()
    clock = FakeClock()
    monkeypatch.setattr(events, "EventsApi", lambda api_client, clock: api)
    monkeypatch.setattr("distributetrain.manager.reporting.reporting.TERMINATION_LOG", str(tmp_path / "termination-log"))

    def run(watches, settings=SETTINGS, nodes=(("a", 1), ("b", 1)), pods_stay_terminating=False,
            phases=("run",), pods=(), record=None, on_create=(), events=(), events_forbidden=False,
            real_time=False, objects=(), namespace_annotations=None, manager_started=None, failures=None):
        """``nodes``: (name, GPUs) or whole Nodes; ``pods`` exist before the manager starts;
        ``record`` is on its pod already; ``on_create`` change each object created, as
        mutating webhooks do; ``events``: core/v1 Events of the namespace already (the
        kubelet's), which the manager may not read with ``events_forbidden``; with
        ``real_time``, on the real clock (Events a story sends reach the manager on an
        informer's own thread, in real time); ``objects``: others the cluster has already
        (the job's PersistentVolumeClaims and their volumes); ``namespace_annotations``: the job
        namespace's; ``manager_started``: the manager pod's status.startTime; ``failures``:
        FakeKube's scripted failures of its calls."""
        kube = FakeKube([n if isinstance(n, dict) else node(*n) for n in nodes], pods,
                        clock=RealClock() if real_time else clock)
        kube.events = list(events)
        for obj in objects:
            kube.put(obj)
        kube.namespace_annotations[settings.namespace] = dict(namespace_annotations or {})
        if events_forbidden:
            kube.list_pages = refusing_events(kube.list_pages)
        kube.on_create = list(on_create)
        kube.manager["metadata"]["annotations"].update(record or {})
        if manager_started:
            kube.manager["status"]["startTime"] = manager_started
        kube.pod_watches = watches
        kube.pods_stay_terminating = pods_stay_terminating
        kube.failures = dict(failures or {})
        for phase in phases:  # as manager.sh runs them, one process after the other
            code = lifecycle.execute(kube, settings, phase, kube.clock)
        return code, [(e["reason"], e["type"], e["note"]) for e in api.created], kube

    run.events_api = api
    run.clock = clock
    return run


def test_a_successful_job_tells_its_story_in_order(story):
    code, recorded, kube = story([
        [("demo-worker-0", UNSCHEDULED), ("demo-worker-0", running()), ("demo-chief", PULLING)],
        [("demo-chief", running(ip="10.0.0.3"))],
        [("demo-chief", ended(0))],
    ])
    assert code == 0
    assert recorded == [
        ("Planned", "Normal", "2 GPUs on 2 nodes: a=1,b=1 (the chief's share last)"),
        ("WorkersCreated", "Normal", "demo-worker-0 on a (1 GPUs)"),
        ("ChiefCreated", "Normal", "demo-chief on b (1 GPUs): horovodrun -np 2 over 2 pods once the workers are Ready"),
        ("PodWaiting", "Warning", f"demo-worker-0: not scheduled: {UNSCHEDULABLE}"),
        ("WorkersReady", "Normal", "1 of 1 Ready: demo-worker-0 (10.0.0.2)"),
        ("ChiefStarted", "Normal", "demo-chief is running: training started"),
        ("Succeeded", "Normal", "training finished (exit code 0)"),
    ]
    assert names.ANNOTATION_WAITING not in kube.manager["metadata"]["annotations"]


def test_one_list_of_the_job_s_pods_serves_every_wait_of_a_process(story, monkeypatch):
    """The job's pods are one informer in a process (``ProcessState.pods``): the attempt's
    start, the chief's and its end are judged on one list and its watch, not a list each."""
    lists = []
    list_all = FakeKube.list_all

    def listing(self, kind, namespace=None, **selectors):
        lists.append((kind, selectors.get("label_selector")))
        return list_all(self, kind, namespace, **selectors)

    monkeypatch.setattr(FakeKube, "list_all", listing)
    code, _, _ = story([
        [("demo-worker-0", running()), ("demo-chief", PULLING)],
        [("demo-chief", running(ip="10.0.0.3"))],
        [("demo-chief", ended(0))],
    ])
    # Besides the informer's: the look for an attempt to adopt, and the teardown's.
    assert (code, lists.count(("Pod", SETTINGS.selector))) == (0, 3)


@pytest.mark.parametrize("annotations,asked,ids", [
    ({}, "auto", {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}),
    ({podsecurity.OPENSHIFT_UID_RANGE_ANNOTATION: "1000680000/10000"}, "auto", {}),
    ({podsecurity.OPENSHIFT_UID_RANGE_ANNOTATION: "1000680000/10000"}, 1000680005,
     {"runAsUser": 1000680005, "runAsGroup": 1000680005, "fsGroup": 1000680005}),
], ids=["plain", "openshift", "openshift-asked"])
def test_job_pods_run_as_the_namespace_allows(story, annotations, asked, ids):
    """Where the namespace says the platform assigns UIDs, job pods name none (OpenShift
    refuses any outside its range); a UID asked for is the user's to choose. The record
    keeps what was asked."""
    created = []
    settings = SETTINGS.replace(run_as_user=asked)
    code, _, kube = story([[("demo-worker-0", running()), ("demo-chief", PULLING)],
                           [("demo-chief", running(ip="10.0.0.3"))], [("demo-chief", ended(0))]],
                          settings=settings, phases=("pre-training", "post-training"),
                          on_create=[created.append], namespace_annotations=annotations)
    assert code == 0
    contexts = [obj["spec"]["securityContext"] for obj in created if obj["kind"] == "Pod"]
    assert len(contexts) == 4  # dry run and real, worker and chief
    assert all(c == {"runAsNonRoot": True, **ids, "seccompProfile": {"type": "RuntimeDefault"}} for c in contexts)
    assert JobRecord.of(kube.manager).spec == settings


def test_a_job_that_one_rack_holds_lands_on_one_rack_and_says_so(story):
    rack = "network.topology.kubernetes.io/rack"
    settings = SETTINGS.replace(topology=topology.parse(rack))
    racks = [node("a", 1, labels={rack: "r1"}), node("b", 1, labels={rack: "r2"}), node("c", 1, labels={rack: "r2"})]
    code, recorded, kube = story([[("demo-worker-0", running()), ("demo-chief", running(ip="10.0.0.3"))],
                                  [("demo-chief", ended(0))]], settings=settings, nodes=racks)
    assert code == 0
    assert recorded[0] == ("Planned", "Normal", "2 GPUs on 2 nodes in rack r2: b=1,c=1 (the chief's share last)")
    assert kube.manager["metadata"]["annotations"][names.ANNOTATION_DOMAINS] == "rack r2"


def test_pre_and_post_training_tell_the_same_story_once(story):
    """manager.sh's two processes run the same loop: post-training adopts the attempt
    pre-training started, says nothing of it again, and serves the chief its hosts."""
    code, recorded, kube = story([[("demo-worker-0", running()), ("demo-chief", PULLING)],
                               [("demo-chief", running(ip="10.0.0.3"))], [("demo-chief", ended(0))]],
                              phases=("pre-training", "post-training"))
    assert code == 0
    assert [r[0] for r in recorded] == ["Planned", "WorkersCreated", "ChiefCreated", "WorkersReady", "ChiefStarted",
                                        "Succeeded"]
    assert kube.annotation_history(names.ANNOTATION_PHASE) == [
        "Planning", "StartingWorkers", "Running", "Training", "Succeeded"]
    assert JobRecord.of(kube.manager).spec == SETTINGS  # beside the record, for status and list


@pytest.mark.parametrize("restart_policy,left,outcome", [
    ("OnFailure", ["demo-chief", "demo-worker-0"], None),
    ("Never", [], 137),
])
def test_the_teardown_after_a_silent_crash_leaves_the_job_to_a_container_that_restarts(story, restart_policy, left,
                                                                                     outcome):
    """manager.sh's teardown after a phase that ended without recording an outcome: a
    manager container the kubelet restarts adopts the job, so it is left alone; else the
    job is torn down and the crash recorded as its outcome."""
    code, _, kube = story([[("demo-worker-0", running()), ("demo-chief", PULLING)]], phases=("pre-training",))
    assert (code, sorted(kube.pods)) == (0, ["demo-chief", "demo-worker-0"])
    kube.manager["spec"]["restartPolicy"] = restart_policy
    assert lifecycle.execute(kube, SETTINGS, "teardown", kube.clock, unless_restarting=True, failed_with=137) == 0
    assert sorted(kube.pods) == left
    assert JobRecord.of(kube.manager).exit_code == outcome


@pytest.mark.parametrize("started_before_s,expected", [(0, (0, "Succeeded")), (3601, (75, "Failed"))])
def test_the_active_deadline_counts_from_the_manager_pod_s_start(story, started_before_s, expected):
    """A manager container that starts (or restarts) late in its pod's life has only what
    is left of --active-deadline, counted from the pod's start."""
    wall_now = story.clock.now()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall_now - started_before_s))
    code, recorded, _ = story([[("demo-worker-0", running()), ("demo-chief", PULLING)],
                               [("demo-chief", running(ip="10.0.0.3"))], [("demo-chief", ended(0))]],
                              settings=SETTINGS.replace(active_deadline_s=3600.0), manager_started=started)
    assert (code, recorded[-1][0]) == expected


VIEW = clusterview.VIEW_NAME


def test_the_chief_holds_its_gpus_from_the_start(story):
    """Created in the same burst as the workers, before any of them is Ready: no other
    pod can take its GPUs while the workers start (or it pulls a multi-GB image)."""
    code, _, kube = story([[("demo-worker-0", running()), ("demo-chief", PULLING)],
                           [("demo-chief", running(ip="10.0.0.3"))], [("demo-chief", ended(0))]])
    assert code == 0
    creates_and_watches = [(verb, kind, name) for verb, kind, name in kube.actions if verb in ("create", "watch")]
    # The cluster surveyed (the booking journal begun first: there was none) and the survey
    # shared; then what no other manager waits on (once the survey said the request is
    # good); then under the Lease the workers and the chief, before any pod is watched.
    assert creates_and_watches == [("create", "Lease", VIEW), ("create", "ConfigMap", journal.JOURNAL_NAME),
                                   ("create", "ConfigMap", VIEW),
                                   ("create", "Secret", "demo-ssh"), ("create", "NetworkPolicy", "demo-pods"),
                                   ("create", "NetworkPolicy", "demo-manager"), ("create", "Lease", names.LOCK_LEASE_NAME),
                                   ("create", "Pod", "demo-worker-0"), ("create", "Pod", "demo-chief"),
                                   ("watch", "Pod", ""), ("watch", "Pod", ""), ("watch", "Pod", "")]


def test_under_the_placement_lease_a_manager_writes_only_the_fence_its_pods_and_their_entry(story):
    """Every other manager waits while one holds the Lease: the plan goes on the manager pod
    once it is let go, and the Events are sent in the background."""
    code, _, kube = story([[("demo-worker-0", running()), ("demo-chief", PULLING)],
                           [("demo-chief", running(ip="10.0.0.3"))], [("demo-chief", ended(0))]])
    assert code == 0
    taken = kube.actions.index(("create", "Lease", names.LOCK_LEASE_NAME))
    let_go = kube.actions.index(("update", "Lease", names.LOCK_LEASE_NAME), taken)
    assert kube.actions[taken + 1:let_go] == [("annotate", "Pod", "demo"), ("create", "Pod", "demo-worker-0"),
                                              ("create", "Pod", "demo-chief"),
                                              ("update", "ConfigMap", journal.JOURNAL_NAME)]
    assert kube.annotation_history(names.ANNOTATION_BOOKED_AT) and kube.annotation_history(names.ANNOTATION_PLAN)
    assert ("annotate", "Pod", "demo") in kube.actions[let_go + 1:]  # the plan


def test_a_failed_job_ends_with_a_warning_naming_the_exit_code(story):
    code, recorded, _ = story([
        [("demo-worker-0", running()), ("demo-chief", PULLING)],
        [("demo-chief", running(ip="10.0.0.3"))],
        [("demo-chief", ended(1))],
    ])
    assert code == 1
    assert [r[0] for r in recorded] == ["Planned", "WorkersCreated", "ChiefCreated", "WorkersReady", "ChiefStarted",
                                        "Failed"]
    assert recorded[-1] == ("Failed", "Warning", "chief exited with code 1 (exit code 1)")


def test_a_sigterm_during_a_best_effort_api_call_still_ends_the_job(story):
    """The signal's handler raises in whatever call the main thread is in: here the first,
    the best-effort write of the job's spec, whose API errors the job rides out. The
    cancellation is no API error: the job ends (143) and starts nothing. (Taken for one, it
    was logged and the job trained on; its only SIGTERM spent, the manager was killed at
    the end of its grace period.)"""
    code, recorded, kube = story([[("demo-worker-0", running()), ("demo-chief", running(ip="10.0.0.3"))],
                                  [("demo-chief", ended(0))]],
                                 failures={"annotate Pod": [errors.Cancelled("received SIGTERM")]})
    assert code == 143
    assert recorded == [("Failed", "Warning", "received SIGTERM (exit code 143)")]
    assert kube.pods == {} and kube.secrets == {}


def test_workers_never_ready_are_released_and_the_job_fails_saying_why(story):
    code, recorded, kube = story([[("demo-worker-0", UNSCHEDULED), ("demo-chief", PULLING)]],
                                 settings=SETTINGS.replace(worker_ready_timeout_s=0.5))
    assert code == 75
    assert [r[:2] for r in recorded] == [("Planned", "Normal"), ("WorkersCreated", "Normal"),
                                         ("ChiefCreated", "Normal"), ("PodWaiting", "Warning"),
                                         ("Released", "Warning"), ("Failed", "Warning")]
    assert recorded[4][2] == (f"pods not Ready within 0s (demo-worker-0: not scheduled: {UNSCHEDULABLE}; "
                              "demo-chief: container chief: ContainerCreating); released them")
    assert "demo-worker-0: not scheduled: 0/2 nodes are available" in recorded[5][2]
    assert kube.pods == {} and kube.secrets == {}


@pytest.mark.parametrize("phase", ["pre-training", "run"])
def test_a_failure_in_either_phase_ends_with_everything_the_job_created_deleted_once(story, phase, caplog):
    caplog.set_level("INFO", logger="distributetrain")
    code, recorded, kube = story([[("demo-worker-0", UNSCHEDULED), ("demo-chief", PULLING)]], phases=(phase,),
                                 settings=SETTINGS.replace(worker_ready_timeout_s=0.5))
    assert (code, recorded[-1][0]) == (75, "Failed")
    assert kube.pods == {} and kube.secrets == {}
    said = [record.getMessage() for record in caplog.records]
    assert [line for line in said if line.startswith("job demo torn down")] == ["job demo torn down: nothing left"]
    assert said.index("job demo torn down: nothing left") < next(
        i for i, line in enumerate(said) if line.startswith("job demo failed: pods not Ready"))


def test_a_lost_attempts_pods_are_waited_for_their_grace_period_and_a_slack():
    assert teardown.old_pods_gone_s(SETTINGS) == 30.0
    assert teardown.old_pods_gone_s(SETTINGS.replace(termination_grace_period_s=300.0)) == 320.0


def test_a_re_plan_names_its_pods_afresh_and_never_adopts_a_terminating_one(story):
    """The released pods stay terminating (their nodes died): the next attempt waits for
    them only a bounded time, never adopts them, and plans around them under new names,
    recorded as attempt 1."""
    # The wait is the pods' grace period (--termination-grace-period) and a slack.
    code, recorded, kube = story(
        [[("demo-worker-0", UNSCHEDULED)], None, None,
         [("demo-worker-0-r1", running()), ("demo-chief-r1", PULLING)], [("demo-chief-r1", running(ip="10.0.0.3"))],
         [("demo-chief-r1", ended(0))]],
        settings=SETTINGS.replace(worker_ready_timeout_s=0.5, wait_for_gpus_s=60.0, termination_grace_period_s=0.0),
        nodes=(("a", 1), ("b", 1), ("c", 1), ("d", 1)), pods_stay_terminating=True)
    assert code == 0
    assert [r[0] for r in recorded] == ["Planned", "WorkersCreated", "ChiefCreated", "PodWaiting", "Released",
                                        "Planned", "WorkersCreated", "ChiefCreated", "WorkersReady", "ChiefStarted",
                                        "Succeeded"]
    first_nodes = {inventory.pinned_node(kube.pods[name]["spec"]) for name in ("demo-worker-0", "demo-chief")}
    assert "demo-worker-0-r1 on" in recorded[6][2] and "demo-chief-r1 on" in recorded[7][2]
    assert kube.manager["metadata"]["annotations"][names.ANNOTATION_ATTEMPT] == "1"
    # The terminating pods still hold their GPUs: attempt 1 planned around them.
    assert all(f"{node}=" not in recorded[5][2] for node in first_nodes)
    # Torn down but the finished chief of the last attempt, kept for its logs.
    assert {name for name, pod in kube.pods.items() if not pod["metadata"].get("deletionTimestamp")} == {"demo-chief-r1"}


WORKER_KILLED = {"phase": "Failed", "containerStatuses": [{"name": "worker", "state": {"terminated": {"exitCode": 137}}}]}


def test_a_lost_worker_restarts_the_job_under_fresh_names_within_the_budget(story):
    code, recorded, kube = story(
        [[("demo-worker-0", running()), ("demo-chief", PULLING)], [("demo-chief", running(ip="10.0.0.3"))],
         [("demo-worker-0", WORKER_KILLED)],
         [("demo-worker-0-r1", running()), ("demo-chief-r1", PULLING)], [("demo-chief-r1", running(ip="10.0.0.3"))],
         [("demo-chief-r1", ended(0))]],
        settings=SETTINGS.replace(max_restarts=2))
    assert code == 0
    assert [r[0] for r in recorded] == ["Planned", "WorkersCreated", "ChiefCreated", "WorkersReady", "ChiefStarted",
                                        "Restarting", "Planned", "WorkersCreated", "ChiefCreated", "WorkersReady",
                                        "ChiefStarted", "Succeeded"]
    assert recorded[5][1:] == ("Warning", "pod demo-worker-0 ended (Failed, exit code 137); restart 1 of 2 "
                                          "(attempt 1) in 2s")
    annotations = kube.manager["metadata"]["annotations"]
    assert (annotations[names.ANNOTATION_RESTARTS], annotations[names.ANNOTATION_ATTEMPT]) == ("1", "1")
    assert annotations[names.ANNOTATION_RESTART_REASON] == "pod demo-worker-0 ended (Failed, exit code 137)"
    assert set(kube.pods) == {"demo-chief-r1"}  # the lost attempt torn down; the finished chief kept


def test_a_worker_whose_end_is_reported_after_the_chief_s_failure_is_still_the_cause(story):
    """The chief fails over the broken ssh connection before the kubelet reports the
    worker's end (it relists every second): the job restarts, as for a lost worker."""
    code, recorded, _ = story(
        [[("demo-worker-0", running()), ("demo-chief", PULLING)], [("demo-chief", running(ip="10.0.0.3"))],
         [("demo-chief", ended(1))], [("demo-worker-0", WORKER_KILLED)],
         [("demo-worker-0-r1", running()), ("demo-chief-r1", PULLING)], [("demo-chief-r1", running(ip="10.0.0.3"))],
         [("demo-chief-r1", ended(0))]],
        settings=SETTINGS.replace(max_restarts=1))
    assert code == 0
    assert [r for r in recorded if r[0] == "Restarting"] == [
        ("Restarting", "Warning", "pod demo-worker-0 ended (Failed, exit code 137); restart 1 of 1 (attempt 1) in 2s")]


def test_a_chief_that_fails_alone_is_its_own_failure_once_the_workers_had_time_to_say(story):
    started = story.clock.monotonic()
    code, recorded, _ = story(
        [[("demo-worker-0", running()), ("demo-chief", PULLING)], [("demo-chief", running(ip="10.0.0.3"))],
         [("demo-chief", ended(3))]],
        settings=SETTINGS.replace(max_restarts=1))
    assert code == 3 and "Restarting" not in [r[0] for r in recorded]
    assert story.clock.monotonic() - started >= podwaits.WORKER_STATUS_LAG_S


@pytest.mark.parametrize("used,allowed", [(0, 0), (1, 1)])
def test_without_restarts_left_a_lost_worker_ends_the_job_with_71(story, used, allowed):
    code, recorded, kube = story(
        [[("demo-worker-0", running()), ("demo-chief", PULLING)], [("demo-chief", running(ip="10.0.0.3"))],
         [("demo-worker-0", WORKER_KILLED)]],
        settings=SETTINGS.replace(max_restarts=allowed), record={names.ANNOTATION_RESTARTS: str(used)})
    assert code == 71
    assert "Restarting" not in [r[0] for r in recorded]
    assert kube.pods == {}


@pytest.mark.parametrize("allowed", [0, 1])
def test_a_worker_lost_while_starting_restarts_the_job_within_the_budget(story, allowed):
    """Lost before training started (its node failed, say): the same budget as a loss mid-training."""
    code, recorded, kube = story(
        [[("demo-worker-0", WORKER_KILLED)],
         [("demo-worker-0-r1", running()), ("demo-chief-r1", PULLING)], [("demo-chief-r1", running(ip="10.0.0.3"))],
         [("demo-chief-r1", ended(0))]],
        settings=SETTINGS.replace(max_restarts=allowed))
    cause = "pod demo-worker-0 ended (Failed, exit code 137) before training started"
    if not allowed:
        assert (code, [r[0] for r in recorded]) == (71, ["Planned", "WorkersCreated", "ChiefCreated", "PodWaiting",
                                                         "Failed"])
        assert recorded[-1][2] == f"{cause}; aborted the job (exit code 71)"
        assert kube.pods == {} and kube.secrets == {}
        return
    assert code == 0
    assert [r[0] for r in recorded] == ["Planned", "WorkersCreated", "ChiefCreated", "PodWaiting", "Restarting",
                                        "Planned", "WorkersCreated", "ChiefCreated", "WorkersReady", "ChiefStarted",
                                        "Succeeded"]
    assert recorded[4][2] == f"{cause}; restart 1 of 1 (attempt 1) in 2s"
    assert kube.manager["metadata"]["annotations"][names.ANNOTATION_RESTART_REASON] == cause
    assert set(kube.pods) == {"demo-chief-r1"}


def test_a_chief_that_fails_on_its_own_is_not_restarted(story):
    code, recorded, _ = story(
        [[("demo-worker-0", running()), ("demo-chief", PULLING)], [("demo-chief", running(ip="10.0.0.3"))],
         [("demo-chief", ended(1))]],
        settings=SETTINGS.replace(max_restarts=3))
    assert code == 1
    assert "Restarting" not in [r[0] for r in recorded]


def test_the_waiting_annotation_says_why_while_it_waits(story):
    _, _, kube = story([[("demo-worker-0", UNSCHEDULED), ("demo-worker-0", running()), ("demo-chief", PULLING)],
                        [("demo-chief", running(ip="10.0.0.3"))], [("demo-chief", ended(0))]])
    seen = [None if value is None else json.loads(value)
            for value in kube.annotation_history(names.ANNOTATION_WAITING)]
    # Written in the background, so a state may be superseded before its turn, but never
    # out of order, and each wait ends with nothing waited on.
    states = iter([{"demo-worker-0": "waiting for the scheduler", "demo-chief": "waiting for the scheduler"},
                   {"demo-worker-0": f"not scheduled: {UNSCHEDULABLE}", "demo-chief": "waiting for the scheduler"},
                   {"demo-chief": "waiting for the scheduler"},
                   {"demo-chief": "container chief: ContainerCreating"},
                   None,
                   {"demo-chief": "container chief: ContainerCreating"},
                   None,
                   None])  # the outcome clears it too
    assert all(any(value == state for state in states) for value in seen), seen
    assert seen[-2:] == [None, None] and None in seen[:-2], seen


def test_bad_input_found_by_the_manager_is_a_failed_event(story, monkeypatch):
    def refuse(kube, settings):
        raise errors.UsageError("--namespace", "namespace 'ml' does not exist")

    monkeypatch.setattr("distributetrain.manager.job.pretraining.preflight", refuse)
    code, recorded, _ = story([])
    assert code == 2
    assert recorded == [("Failed", "Warning", "--namespace: namespace 'ml' does not exist (exit code 2)")]


def test_a_node_whose_cpu_another_pod_holds_is_left_out_and_the_shortage_says_so(story):
    def two_cores(name):
        two = node(name, 1)
        two["status"]["allocatable"].update(cpu="2", memory="16Gi", pods="110")
        return two

    tenant = {"metadata": {"name": "tenant", "namespace": "other", "uid": "t"}, "status": {"phase": "Running"},
              "spec": {"nodeName": "b", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    code, recorded, kube = story([], nodes=(two_cores("a"), two_cores("b")), pods=[tenant])
    assert code == 69 and kube.writes("create", "Pod") == []
    assert recorded[-1] == ("Failed", "Warning", "requested 2 GPUs but only 1 are free in the cluster; unavailable: "
                            "b has 1 GPUs free but cpu for 0 (use --wait-for-gpus to wait for them) (exit code 69)")


@pytest.mark.parametrize("code,says", [
    (143, "stopped by SIGTERM"), (137, "stopped by SIGKILL"), (1, "failed with exit code 1"),
    (200, "failed with exit code 200"),
])
def test_an_abnormal_end_says_what_stopped_the_manager(code, says):
    assert says in ending.abnormal_end(code)


def earlier_run_pod(name, role, status, owner_references=True):
    """A pod of an earlier run of the job "demo": another manager's UID."""
    metadata = {"name": name, "namespace": "ml", "labels": {**names.job_labels("demo", role, "uid-0")}}
    if owner_references:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "demo", "uid": "uid-0"}]
    return {"metadata": metadata, "spec": {}, "status": status}


def test_an_earlier_runs_finished_chief_is_never_adopted(story):
    """A manager re-applied under the same name (or an earlier job left in another
    namespace) finds the earlier chief, finished with exit 0: it is deleted, never taken
    for this run's outcome, and this run trains and reports its own exit code."""
    earlier = earlier_run_pod("demo-chief", names.ROLE_CHIEF, ended(0), owner_references=False)
    code, recorded, kube = story([[("demo-worker-0", running()), ("demo-chief", PULLING)],
                                  [("demo-chief", running(ip="10.0.0.3"))], [("demo-chief", ended(3))]],
                                 pods=[earlier])
    assert code == 3
    assert [r[0] for r in recorded][:3] == ["Planned", "WorkersCreated", "ChiefCreated"]
    assert names.owner_uid_of(kube.pods["demo-chief"]) == "uid-1"


def test_an_earlier_run_still_training_elsewhere_makes_the_name_bad_input(story):
    earlier = earlier_run_pod("demo-worker-0", names.ROLE_WORKER, running(), owner_references=False)
    code, recorded, kube = story([], pods=[earlier])
    assert code == 2
    assert recorded[-1][2].startswith("--job-name: job 'demo' already runs in namespace 'ml' under another "
                                      "manager (demo-worker-0)")
    assert set(kube.pods) == {"demo-worker-0"} and names.owner_uid_of(kube.pods["demo-worker-0"]) == "uid-0"


def inject_proxy(native: bool):
    """A service mesh's injector: its proxy in every pod, as a classic sidecar (a second
    container) or a native one (an init container with restartPolicy Always)."""
    proxy = {"name": "istio-proxy", "image": "istio/proxyv2:1.24.0"}

    def inject(obj):
        if obj["kind"] != "Pod":
            return
        if native:
            obj["spec"].setdefault("initContainers", []).append(proxy | {"restartPolicy": "Always"})
        else:
            obj["spec"]["containers"].append(proxy)

    return inject


def trained_beside_a_proxy(code, native):
    """The chief's training container terminated; its proxy runs on, so the pod stays Running."""
    proxy = {"name": "istio-proxy", "state": {"running": {"startedAt": "2026-01-02T12:00:00Z"}}}
    status = {"phase": "Running", "podIP": "10.0.0.3", "conditions": [{"type": "Ready", "status": "False"}],
              "containerStatuses": [{"name": "chief", "state": {"terminated": {"exitCode": code}}}]}
    if native:
        status["initContainerStatuses"] = [proxy]
    else:
        status["containerStatuses"].append(proxy)
    return status


@pytest.mark.parametrize("native", [False, True], ids=["classic-sidecar", "native-sidecar"])
@pytest.mark.parametrize("code", [0, 3])
def test_a_chief_with_a_sidecar_ends_the_job_with_its_trainings_exit_code(story, native, code):
    code_seen, recorded, kube = story([
        [("demo-worker-0", running()), ("demo-chief", running(ip="10.0.0.3"))],
        [("demo-chief", trained_beside_a_proxy(code, native))],
    ], on_create=[inject_proxy(native)])
    assert code_seen == code
    assert recorded[-1][0] == ("Succeeded" if code == 0 else "Failed")
    # A classic proxy would hold the chief's GPUs for ever: the chief goes too. A native one
    # is stopped by the kubelet, so the chief is kept for its logs, as without a mesh.
    assert sorted(kube.pods) == ([] if not native else ["demo-chief"])
    assert kube.secrets == {}


def kubelet_event(reason, message, pod, host, at):
    """A core/v1 Event the kubelet records about a pod."""
    return {"kind": "Event", "reason": reason, "message": message, "lastTimestamp": at, "source": {"host": host},
            "involvedObject": {"kind": "Pod", "name": pod}, "metadata": {"name": f"{pod}.{reason}"}}


def pull_events(pod, host, started="2026-11-26T20:00:00Z"):
    return kubelet_event("Pulling", 'Pulling image "reg/base:1"', pod, host, started)


def pulled(pod, host, after_s=6):
    return kubelet_event("Pulled", f'Successfully pulled image "reg/base:1" in {after_s}m0s', pod, host,
                         f"2026-11-26T20:0{after_s}:00Z")


def creating(container):
    return {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": container, "state": {"waiting": {"reason": "ContainerCreating"}}}]}


SLOW_PULL_SETTINGS = SETTINGS.replace(worker_ready_timeout_s=0.3)


def slow_pull_story(worker_pulled, chief_pulled, waits_s=5):
    """Each pod pulls its image for several times --worker-ready-timeout (each ``None`` is
    one re-check of the start, 0.2 s here), the worker first, then the chief."""
    return [[("demo-worker-0", creating("worker")), ("demo-chief", creating("chief"))], *[None] * waits_s,
            [lambda kube: (kube.put(*worker_pulled) or ("demo-worker-0", running()))],
            *[None] * waits_s,
            [lambda kube: (kube.put(*chief_pulled) or ("demo-chief", running(ip="10.0.0.3")))],
            [("demo-chief", ended(0))]]


@pytest.fixture
def quick_rechecks(monkeypatch):
    """Real time, short: a slow start's reason refreshed every 0.2 s (each ``None`` of
    ``slow_pull_story``), by every phase that waits for pods to start."""
    for phase in (pretraining, posttraining):
        monkeypatch.setattr(phase, "StartWatch", functools.partial(startwatch.StartWatch, recheck_s=0.2))


def test_image_pulls_longer_than_the_worker_ready_timeout_are_progress_not_failure(story, quick_rechecks):
    """A 6-minute pull on each fresh node with a 5-minute timeout, scaled down: the
    pulls pause --worker-ready-timeout, show in the waiting annotation with their time so
    far, are recorded once per pod, and the job trains and exits 0."""
    pulls = [pull_events("demo-worker-0", "a"), pull_events("demo-chief", "b")]
    code, recorded, kube = story(slow_pull_story([pulled("demo-worker-0", "a")], [pulled("demo-chief", "b")]),
                                 settings=SLOW_PULL_SETTINGS, events=pulls, real_time=True)
    assert code == 0
    # One Event per pod and stage (the chief's, seen again by post-training, raises its count).
    assert list(dict.fromkeys(r for r in recorded if r[0] == "Pulling")) == [
        ("Pulling", "Normal", 'demo-worker-0: pulling image "reg/base:1" on a'),
        ("Pulling", "Normal", 'demo-chief: pulling image "reg/base:1" on b')]
    assert [r[0] for r in recorded if r[0] != "Pulling"] == ["Planned", "WorkersCreated", "ChiefCreated",
                                                            "WorkersReady", "ChiefStarted", "Succeeded"]
    shown = [json.loads(value) for value in kube.annotation_history(names.ANNOTATION_WAITING) if value]
    assert {"demo-worker-0": 'pulling image "reg/base:1" on a for 0s',
            "demo-chief": 'pulling image "reg/base:1" on b for 0s'} in shown
    assert names.ANNOTATION_WAITING not in kube.manager["metadata"]["annotations"]


def test_without_the_events_rule_a_pull_counts_against_the_timeout_as_before(story, quick_rechecks, monkeypatch,
                                                                             caplog):
    monkeypatch.setattr("distributetrain.manager.watching.startwatch.StartWatch.refusal_logged", False)
    pulls = [pull_events("demo-worker-0", "a"), pull_events("demo-chief", "b")]
    code, recorded, _ = story(slow_pull_story([pulled("demo-worker-0", "a")], [pulled("demo-chief", "b")]),
                              settings=SLOW_PULL_SETTINGS, events=pulls, events_forbidden=True,
                              real_time=True)
    assert code == 75
    assert "Pulling" not in [r[0] for r in recorded]
    assert "cannot follow the Events of its pods" in caplog.text and "events list and watch" in caplog.text


def test_an_image_pull_past_its_own_bound_releases_the_attempt_saying_so(story, quick_rechecks):
    pulls = [pull_events("demo-worker-0", "a"), pull_events("demo-chief", "b")]
    code, recorded, _ = story(slow_pull_story([pulled("demo-worker-0", "a")], [pulled("demo-chief", "b")]),
                              settings=SLOW_PULL_SETTINGS.replace(image_pull_timeout_s=0.5), events=pulls,
                              real_time=True)
    assert code == 75
    released = next(note for reason, _, note in recorded if reason == "Released")
    assert 'demo-worker-0: pulling image "reg/base:1" on a for 0s' in released
