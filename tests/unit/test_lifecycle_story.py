"""A whole job (pre- and post-training) on an in-memory API: the Events it records on
the manager pod, in order, and what it says about pods that wait."""

import copy
import json
import time

import pytest

from distributetrain import errors, events, inventory, lifecycle, names
from distributetrain.settings import JobSettings

SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="reg/base:1", owner_uid="uid-1",
                       worker_ready_timeout_s=30.0)
UNSCHEDULABLE = ("0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: "
                 "0/2 nodes are available: 2 Preemption is not helpful for scheduling.")


def gpu_node(name, gpus):
    return {"metadata": {"name": name, "labels": {names.HOSTNAME_LABEL: name}}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": {"nvidia.com/gpu": str(gpus)}}}


class FakeKube:
    """Nodes, pods, a Secret and a Lease in memory. Each watch plays one scripted list of
    (pod name, new status); a watch with nothing scripted (or None) waits out its timeout."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.pods: dict[str, dict] = {}
        self.secrets: dict[str, dict] = {}
        self.lease = None
        self.manager = {"metadata": {"name": "demo", "namespace": "ml", "uid": "uid-1", "annotations": {}},
                        "spec": {"restartPolicy": "Never"}, "status": {"phase": "Running"}}
        self.watches: list[list[tuple[str, dict]]] = []
        self.pods_stay_terminating = False
        self.api_client = None

    # reads
    def namespace_exists(self, name):
        return True

    def list_pages(self, kind, namespace=None, **selectors):
        yield (copy.deepcopy(self.nodes) if kind == "nodes" else self._pods(namespace, selectors)), "1"

    def list_all(self, kind, namespace=None, **selectors):
        return (copy.deepcopy(self.nodes) if kind == "nodes" else self._pods(namespace, selectors)), "1"

    def _pods(self, namespace, selectors):
        key, _, value = selectors.get("label_selector", "").partition("=")
        return [copy.deepcopy(p) for p in self.pods.values() if not key or p["metadata"]["labels"].get(key) == value]

    def get_pod(self, namespace, name):
        return copy.deepcopy(self.manager) if name == "demo" else copy.deepcopy(self.pods.get(name))

    def read(self, kind, namespace, name):
        return copy.deepcopy((self.pods if kind == "Pod" else self.secrets).get(name))

    # writes
    def create_owned(self, obj, dry_run=False):
        if dry_run:
            return obj
        created = copy.deepcopy(obj)
        created["status"] = {"phase": "Pending"}
        (self.pods if obj["kind"] == "Pod" else self.secrets)[obj["metadata"]["name"]] = created
        return copy.deepcopy(created)

    def create_all_owned(self, objs):
        return [self.create_owned(obj) for obj in objs]

    def delete(self, kind, namespace, name, grace_period_s=None):
        if kind == "Pod" and self.pods_stay_terminating and name in self.pods:
            # As on a dead node: the pod stays, terminating, for as long as the story runs.
            first = "deletionTimestamp" not in self.pods[name]["metadata"]
            self.pods[name]["metadata"]["deletionTimestamp"] = "2026-01-02T12:00:00Z"
            return first
        return (self.pods if kind == "Pod" else self.secrets).pop(name, None) is not None

    def delete_all(self, kind, namespace, pod_names):
        return [name for name in pod_names if self.delete(kind, namespace, name)]

    def annotate_pod(self, namespace, name, annotations):
        current = self.manager["metadata"]["annotations"]
        for key, value in annotations.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value

    def get_lease(self, namespace, name):
        return copy.deepcopy(self.lease)

    def create_lease(self, lease):
        self.lease = copy.deepcopy(lease)
        return lease

    def replace_lease(self, lease):
        self.lease = copy.deepcopy(lease)
        return lease

    # watches
    def watch_pods(self, namespace, resource_version, timeout_s, **selectors):
        script = self.watches.pop(0) if self.watches else None
        if script is None:  # nothing (more) scripted: the watch waits out its timeout
            time.sleep(timeout_s)
            return
        for name, status in script:
            self.pods[name]["status"] = status
            yield "MODIFIED", copy.deepcopy(self.pods[name])


    def watch_nodes(self, resource_version, timeout_s):
        time.sleep(timeout_s)  # nodes never change in these stories
        yield from ()


class FakeEventsApi:
    def __init__(self):
        self.created = []

    def create(self, event):
        self.created.append(event)

    def patch(self, namespace, name, patch):
        # The same reason and note again: the first Event's series count goes up.
        first = next(e for e in self.created if e["metadata"]["name"] == name)
        self.created.append(first | {"series": patch["series"]})


def running(ready=True, ip="10.0.0.2"):
    return {"phase": "Running", "podIP": ip, "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True" if ready else "False"}]}


def ended(code):
    return {"phase": "Succeeded" if code == 0 else "Failed", "podIP": "10.0.0.3",
            "containerStatuses": [{"name": "chief", "state": {"terminated": {"exitCode": code}}}]}


UNSCHEDULED = {"phase": "Pending", "conditions": [
    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}]}


@pytest.fixture
def story(monkeypatch, tmp_path):
    """Runs a job on nodes a=1, b=1; returns (reason, type, note) of every Event, in order."""
    api = FakeEventsApi()
    monkeypatch.setattr(events, "EventsApi", lambda api_client: api)
    monkeypatch.setattr("distributetrain.reporting.TERMINATION_LOG", str(tmp_path / "termination-log"))

    def run(watches, settings=SETTINGS, nodes=(("a", 1), ("b", 1)), pods_stay_terminating=False):
        kube = FakeKube([gpu_node(name, gpus) for name, gpus in nodes])
        kube.watches = watches
        kube.pods_stay_terminating = pods_stay_terminating
        code = lifecycle.execute(kube, settings, "run")
        return code, [(e["reason"], e["type"], e["note"]) for e in api.created], kube

    return run


def test_a_successful_job_tells_its_story_in_order(story):
    code, recorded, kube = story([
        [("demo-worker-0", UNSCHEDULED), ("demo-worker-0", running())],
        [("demo-chief", running(ip="10.0.0.3"))],
        [("demo-chief", ended(0))],
    ])
    assert code == 0
    assert recorded == [
        ("Planned", "Normal", "2 GPUs on 2 nodes: a=1,b=1 (the chief's share last)"),
        ("WorkersCreated", "Normal", "demo-worker-0 on a (1 GPUs)"),
        ("PodWaiting", "Warning", f"demo-worker-0: not scheduled: {UNSCHEDULABLE}"),
        ("WorkersReady", "Normal", "1 of 1 Ready: demo-worker-0 (10.0.0.2)"),
        ("ChiefCreated", "Normal", "demo-chief on b (1 GPUs): horovodrun -np 2 over 2 pods"),
        ("ChiefStarted", "Normal", "demo-chief is running: training started"),
        ("Succeeded", "Normal", "training finished (exit code 0)"),
    ]
    assert names.ANNOTATION_WAITING not in kube.manager["metadata"]["annotations"]


def test_a_failed_job_ends_with_a_warning_naming_the_exit_code(story):
    code, recorded, _ = story([
        [("demo-worker-0", running())],
        [("demo-chief", running(ip="10.0.0.3"))],
        [("demo-chief", ended(1))],
    ])
    assert code == 1
    assert [r[0] for r in recorded] == ["Planned", "WorkersCreated", "WorkersReady", "ChiefCreated", "ChiefStarted",
                                        "Failed"]
    assert recorded[-1] == ("Failed", "Warning", "chief exited with code 1 (exit code 1)")


def test_workers_never_ready_are_released_and_the_job_fails_saying_why(story):
    code, recorded, kube = story([[("demo-worker-0", UNSCHEDULED)]],
                                 settings=SETTINGS.replace(worker_ready_timeout_s=0.5))
    assert code == 75
    assert [r[:2] for r in recorded] == [("Planned", "Normal"), ("WorkersCreated", "Normal"),
                                         ("PodWaiting", "Warning"), ("Released", "Warning"), ("Failed", "Warning")]
    assert recorded[3][2] == (f"workers not Ready within 0s (demo-worker-0: not scheduled: {UNSCHEDULABLE}); "
                              "released them")
    assert "demo-worker-0: not scheduled: 0/2 nodes are available" in recorded[4][2]
    assert kube.pods == {} and kube.secrets == {}


def test_a_re_plan_names_its_pods_afresh_and_never_adopts_a_terminating_one(story):
    """The released worker stays terminating (its node died): the next attempt neither
    waits for it nor adopts it; its pods have new names, recorded as attempt 1."""
    code, recorded, kube = story(
        [[("demo-worker-0", UNSCHEDULED)], None,
         [("demo-worker-0-r1", running())], [("demo-chief-r1", running(ip="10.0.0.3"))], [("demo-chief-r1", ended(0))]],
        settings=SETTINGS.replace(worker_ready_timeout_s=0.5, wait_for_gpus_s=60.0),
        nodes=(("a", 1), ("b", 1), ("c", 1)), pods_stay_terminating=True)
    assert code == 0
    assert [r[0] for r in recorded] == ["Planned", "WorkersCreated", "PodWaiting", "Released", "Planned",
                                        "WorkersCreated", "WorkersReady", "ChiefCreated", "ChiefStarted", "Succeeded"]
    first_node = inventory.pinned_node(kube.pods["demo-worker-0"]["spec"])
    assert "demo-worker-0-r1 on" in recorded[5][2] and "demo-chief-r1 on" in recorded[7][2]
    assert kube.manager["metadata"]["annotations"][names.ANNOTATION_ATTEMPT] == "1"
    # The terminating worker still holds its GPUs: attempt 1 planned around it.
    assert first_node and f"{first_node}=" not in recorded[4][2]
    # Torn down but the finished chief of the last attempt, kept for its logs.
    assert {name for name, pod in kube.pods.items() if not pod["metadata"].get("deletionTimestamp")} == {"demo-chief-r1"}


WORKER_KILLED = {"phase": "Failed", "containerStatuses": [{"name": "worker", "state": {"terminated": {"exitCode": 137}}}]}


def test_a_lost_worker_restarts_the_job_under_fresh_names_within_the_budget(story, monkeypatch):
    monkeypatch.setattr("distributetrain.restarts.RESTART_BACKOFF_S", 0.01)
    code, recorded, kube = story(
        [[("demo-worker-0", running())], [("demo-chief", running(ip="10.0.0.3"))], [("demo-worker-0", WORKER_KILLED)],
         [("demo-worker-0-r1", running())], [("demo-chief-r1", running(ip="10.0.0.3"))], [("demo-chief-r1", ended(0))]],
        settings=SETTINGS.replace(max_restarts=2))
    assert code == 0
    assert [r[0] for r in recorded] == ["Planned", "WorkersCreated", "WorkersReady", "ChiefCreated", "ChiefStarted",
                                        "Restarting", "Planned", "WorkersCreated", "WorkersReady", "ChiefCreated",
                                        "ChiefStarted", "Succeeded"]
    assert recorded[5][1:] == ("Warning", "pod demo-worker-0 ended (Failed, exit code 137); restart 1 of 2 "
                                          "(attempt 1) in 0s")
    annotations = kube.manager["metadata"]["annotations"]
    assert (annotations[names.ANNOTATION_RESTARTS], annotations[names.ANNOTATION_ATTEMPT]) == ("1", "1")
    assert annotations[names.ANNOTATION_RESTART_REASON] == "pod demo-worker-0 ended (Failed, exit code 137)"
    assert set(kube.pods) == {"demo-chief-r1"}  # the lost attempt torn down; the finished chief kept


@pytest.mark.parametrize("used,allowed", [(0, 0), (1, 1)])
def test_without_restarts_left_a_lost_worker_ends_the_job_with_71(story, monkeypatch, used, allowed):
    monkeypatch.setattr(FakeKube, "__init__", _with_annotations(FakeKube.__init__, {names.ANNOTATION_RESTARTS: str(used)}))
    code, recorded, kube = story(
        [[("demo-worker-0", running())], [("demo-chief", running(ip="10.0.0.3"))], [("demo-worker-0", WORKER_KILLED)]],
        settings=SETTINGS.replace(max_restarts=allowed))
    assert code == 71
    assert "Restarting" not in [r[0] for r in recorded]
    assert kube.pods == {}


@pytest.mark.parametrize("allowed", [0, 1])
def test_a_worker_lost_while_starting_restarts_the_job_within_the_budget(story, monkeypatch, allowed):
    """Lost before training started (its node failed, say): the same budget as a loss mid-training."""
    monkeypatch.setattr("distributetrain.restarts.RESTART_BACKOFF_S", 0.01)
    code, recorded, kube = story(
        [[("demo-worker-0", WORKER_KILLED)],
         [("demo-worker-0-r1", running())], [("demo-chief-r1", running(ip="10.0.0.3"))], [("demo-chief-r1", ended(0))]],
        settings=SETTINGS.replace(max_restarts=allowed))
    cause = "worker demo-worker-0 ended (Failed, exit code 137) before training started"
    if not allowed:
        assert (code, [r[0] for r in recorded]) == (71, ["Planned", "WorkersCreated", "PodWaiting", "Failed"])
        assert recorded[-1][2] == f"{cause}; aborted the job (exit code 71)"
        assert kube.pods == {} and kube.secrets == {}
        return
    assert code == 0
    assert [r[0] for r in recorded] == ["Planned", "WorkersCreated", "PodWaiting", "Restarting", "Planned",
                                        "WorkersCreated", "WorkersReady", "ChiefCreated", "ChiefStarted", "Succeeded"]
    assert recorded[3][2] == f"{cause}; restart 1 of 1 (attempt 1) in 0s"
    assert kube.manager["metadata"]["annotations"][names.ANNOTATION_RESTART_REASON] == cause
    assert set(kube.pods) == {"demo-chief-r1"}


def test_a_chief_that_fails_on_its_own_is_not_restarted(story):
    code, recorded, _ = story(
        [[("demo-worker-0", running())], [("demo-chief", running(ip="10.0.0.3"))], [("demo-chief", ended(1))]],
        settings=SETTINGS.replace(max_restarts=3))
    assert code == 1
    assert "Restarting" not in [r[0] for r in recorded]


def _with_annotations(init, annotations):
    def patched(self, nodes):
        init(self, nodes)
        self.manager["metadata"]["annotations"].update(annotations)
    return patched


def test_the_waiting_annotation_says_why_while_it_waits(story, monkeypatch):
    seen = []
    original = FakeKube.annotate_pod

    def annotate(self, namespace, name, annotations):
        if names.ANNOTATION_WAITING in annotations:
            value = annotations[names.ANNOTATION_WAITING]
            seen.append(None if value is None else json.loads(value))
        original(self, namespace, name, annotations)

    monkeypatch.setattr(FakeKube, "annotate_pod", annotate)
    story([[("demo-worker-0", UNSCHEDULED), ("demo-worker-0", running())],
           [("demo-chief", running(ip="10.0.0.3"))], [("demo-chief", ended(0))]])
    # Written in the background, so a state may be superseded before its turn, but never
    # out of order, and each wait ends with nothing waited on.
    states = iter([{"demo-worker-0": "waiting for the scheduler"},
                   {"demo-worker-0": f"not scheduled: {UNSCHEDULABLE}"},
                   None,
                   {"demo-chief": "waiting for the scheduler"},
                   None,
                   None])  # the outcome clears it too
    assert all(any(value == state for state in states) for value in seen), seen
    assert seen[-2:] == [None, None] and None in seen[:-2], seen


def test_bad_input_found_by_the_manager_is_a_failed_event(story, monkeypatch):
    def refuse(kube, settings):
        raise errors.UsageError("--namespace", "namespace 'ml' does not exist")

    monkeypatch.setattr("distributetrain.pretraining.preflight", refuse)
    code, recorded, _ = story([])
    assert code == 2
    assert recorded == [("Failed", "Warning", "--namespace: namespace 'ml' does not exist (exit code 2)")]


@pytest.mark.parametrize("code,says", [
    (143, "stopped by SIGTERM"), (137, "stopped by SIGKILL"), (1, "failed with exit code 1"),
    (200, "failed with exit code 200"),
])
def test_an_abnormal_end_says_what_stopped_the_manager(code, says):
    assert says in lifecycle.abnormal_end(code)
