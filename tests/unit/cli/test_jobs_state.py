"""Reading jobs from their objects, and printing them: whole values, whole outputs."""

import dataclasses
import json
from datetime import datetime, timezone

import pytest

from distributetrain.cli.jobs import state, table
from distributetrain.cli.jobs.state import JobStatus, Progress
from distributetrain.core.job import jobspec
from distributetrain.core.settings import JobSettings

NOW = datetime(2026, 1, 2, 12, 0, 0, tzinfo=timezone.utc)
CREATED = "2026-01-02T11:55:00Z"


def manager(name="demo", phase="Running", annotations=None, terminated=None, labels=None, owners=None,
            args=("--num-gpus=6", "--image=img"), **metadata):
    status = {"phase": phase}
    if terminated is not None:
        status["containerStatuses"] = [{"name": "manager", "state": {"terminated": terminated}}]
    return {
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": CREATED,
                     "labels": {"app.kubernetes.io/name": "distributetrain", "distributetrain.io/role": "manager",
                                **({"distributetrain.io/job": name} if labels is None else labels)},
                     "annotations": annotations or {}, "ownerReferences": owners or [], **metadata},
        "spec": {"containers": [{"name": "manager", "args": list(args)}]},
        "status": status,
    }


def child(name, role, phase="Running", ready=False, job="demo", terminating=False):
    labels = {"distributetrain.io/job": job, "distributetrain.io/role": role}
    if role == "worker":
        labels["distributetrain.io/worker-index"] = name.split("-worker-")[1].split("-")[0]
    metadata = {"name": name, "labels": labels} | ({"deletionTimestamp": CREATED} if terminating else {})
    return {"metadata": metadata, "status": {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_training_job():
    pod = manager(annotations={"distributetrain.io/phase": "Training", "distributetrain.io/plan": "gpu-a=5,gpu-b=1"})
    assert state.from_manager(pod) == JobStatus(
        name="demo", namespace="ml", kind="Pod", manager_pod="demo", phase="Training", gpus=6,
        plan=(("gpu-a", 5), ("gpu-b", 1)), created=datetime(2026, 1, 2, 11, 55, tzinfo=timezone.utc),
        exit_code=None, reason="")


def test_finished_job_reports_the_containers_exit_code_and_the_managers_reason():
    pod = manager(phase="Failed", terminated={"exitCode": 3, "reason": "Error", "message": "chief exited with code 3"},
                  annotations={"distributetrain.io/phase": "Failed", "distributetrain.io/exit-code": "3",
                               "distributetrain.io/reason": "chief exited with code 3"})
    status = state.from_manager(pod)
    assert (status.phase, status.exit_code, status.reason, status.finished) == ("Failed", 3, "chief exited with code 3", True)


def test_manager_killed_before_reporting_has_the_pods_verdict():
    pod = manager(phase="Failed", terminated={"exitCode": 137, "reason": "OOMKilled"},
                  annotations={"distributetrain.io/phase": "Training"})
    status = state.from_manager(pod)
    assert (status.phase, status.exit_code, status.reason) == ("Failed", 137, "OOMKilled")


def test_reported_exit_code_while_the_manager_still_tears_down():
    pod = manager(annotations={"distributetrain.io/phase": "Failed", "distributetrain.io/exit-code": "71"})
    assert state.from_manager(pod).exit_code == 71


def test_pending_manager_says_why_and_shows_the_requested_gpus():
    pod = manager(phase="Pending")
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available"}]
    status = state.from_manager(pod)
    assert (status.phase, status.gpus, status.plan, status.reason) == (
        "Pending", 6, (), "not scheduled: 0/3 nodes are available")


def test_deleted_manager_is_terminating():
    assert state.from_manager(manager(deletionTimestamp=CREATED)).phase == "Terminating"


def test_pod_of_a_batch_job_is_named_by_its_label():
    pod = manager(name="demo-x7k2p", labels={"distributetrain.io/job": "demo"},
                  owners=[{"kind": "Job", "name": "demo", "uid": "u"}])
    status = state.from_manager(pod)
    assert (status.name, status.manager_pod, status.kind) == ("demo", "demo-x7k2p", "Job")
    assert state.is_manager_of(pod, "demo") and not state.is_manager_of(pod, "demo-x7k2p")
    assert state.is_child_of(child("demo-x7k2p-chief", "chief", job="demo-x7k2p"), pod)
    assert not state.is_child_of(child("demo-chief", "chief", job="demo"), pod)


def test_manager_applied_from_manager_yaml_is_named_by_its_pod():
    pod = manager(name="distributetrain-manager", labels={})
    assert state.from_manager(pod).name == "distributetrain-manager"


@pytest.mark.parametrize("conditions,phase,reason", [
    ([], "Pending", "waiting for the Job controller to create the manager pod"),
    ([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}],
     "Failed", "Job has reached the specified backoff limit"),
    ([{"type": "Complete", "status": "True"}], "Succeeded", ""),
])
def test_batch_job_without_a_pod(conditions, phase, reason):
    job = {"metadata": {"name": "demo", "namespace": "ml", "creationTimestamp": CREATED},
           "spec": {"template": {"spec": {"containers": [{"name": "manager", "args": ["--num-gpus=4", "--image=i"]}]}}},
           "status": {"conditions": conditions}}
    status = state.from_batch_job(job)
    assert (status.kind, status.manager_pod, status.phase, status.gpus, status.reason) == ("Job", "", phase, 4, reason)


@pytest.mark.parametrize("args,gpus", [(["--num-gpus", "3"], 3), (["--num-gpus=0"], None), (["--image=x"], None),
                                       (["--num-gpus=2", "--future-flag", "--", "--num-gpus=9"], 2)])
def test_requested_gpus_from_the_managers_arguments(args, gpus):
    assert state.requested_gpus(manager(args=args)) == gpus


def test_requested_gpus_from_the_spec_the_manager_recorded():
    """The spec wins over the arguments, which only a manager not started yet (or of an older
    release) leaves to read; a mangled spec is read as none."""
    spec = jobspec.to_json(JobSettings(job_name="demo", namespace="ml", num_gpus=4, image="img"))
    assert state.requested_gpus(manager(args=(), annotations={"distributetrain.io/spec": spec})) == 4
    assert state.requested_gpus(manager(annotations={"distributetrain.io/spec": "{"})) == 6


def test_progress():
    pod = manager(annotations={"distributetrain.io/plan": "a=2,b=2,c=2"})
    children = [child("demo-worker-0", "worker", ready=True), child("demo-worker-1", "worker", phase="Pending")]
    assert state.progress_of(pod, children) == Progress(workers_ready=1, workers=2, chief="", workers_left=2)
    children.append(child("demo-chief", "chief", phase="Succeeded"))
    assert state.progress_of(pod, children).chief == "Succeeded"


def test_progress_counts_only_the_current_attempts_pods():
    """After a re-plan (attempt 1) the released attempt's pods may still be terminating."""
    pod = manager(annotations={"distributetrain.io/plan": "a=2,b=2", "distributetrain.io/attempt": "1"})
    children = [child("demo-worker-0", "worker", ready=True, terminating=True),
                child("demo-chief", "chief", terminating=True),
                child("demo-worker-0-r1", "worker", phase="Pending")]
    assert state.progress_of(pod, children) == Progress(workers_ready=0, workers=1, chief="", workers_left=1)
    children.append(child("demo-chief-r1", "chief", phase="Pending"))
    assert state.progress_of(pod, children).chief == "Pending"


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (119, "119s"), (120, "2m"), (7199, "119m"), (7200, "2h"),
                                          (3 * 86400 + 5, "3d"), (-4, "0s")])
def test_age(seconds, text):
    assert state.format_age(seconds) == text


STATUSES = [
    state.from_manager(manager(annotations={"distributetrain.io/phase": "Training",
                                            "distributetrain.io/plan": "gpu-a=5,gpu-b=1"})),
    state.from_manager(manager(name="old", phase="Failed", terminated={"exitCode": 69},
                               annotations={"distributetrain.io/reason": "requested 8 GPUs but only 6 are free; "
                                            "nodes not eligible: none (use --wait-for-gpus to wait for them)"})),
]


def test_list_table():
    assert table.job_table(STATUSES, NOW, with_namespace=False) == (
        "NAME   PHASE      GPUS   NODES             AGE   EXIT   REASON\n"
        "demo   Training   6      gpu-a=5,gpu-b=1   5m    -      -\n"
        "old    Failed     6      -                 5m    69     requested 8 GPUs but only 6 are free; nodes not eligible:...\n"
    )
    assert table.job_table(STATUSES[:1], NOW, with_namespace=True).splitlines()[1].startswith("ml          demo")


def test_status_text():
    assert table.status_text(STATUSES[0], Progress(1, 1, "Running"), NOW) == (
        "Name:           demo\n"
        "Namespace:      ml\n"
        "Submitted as:   Pod\n"
        "Manager pod:    demo\n"
        "Phase:          Training\n"
        "GPUs:           6 on 2 nodes (gpu-a=5,gpu-b=1)\n"
        "Age:            5m\n"
        "Workers Ready:  1/1\n"
        "Chief:          Running\n"
        "Exit code:      -\n"
        "Reason:         -\n"
    )


def test_status_json():
    assert table.status_json(STATUSES[1], None, NOW) == {
        "name": "old", "namespace": "ml", "kind": "Pod", "managerPod": "old", "phase": "Failed", "gpus": 6,
        "plan": [], "created": "2026-01-02T11:55:00+00:00", "ageSeconds": 300, "exitCode": 69,
        "reason": STATUSES[1].reason, "waiting": {}, "restarts": 0, "lastRestartReason": None,
        "queuePosition": None, "domains": None,
    }
    assert table.status_json(STATUSES[0], Progress(0, 1, ""), NOW)["plan"] == [
        {"node": "gpu-a", "gpus": 5}, {"node": "gpu-b", "gpus": 1}]


def test_status_says_which_network_domains_the_job_got():
    status = dataclasses.replace(STATUSES[0], domains="block b1; rack r1, r2")
    assert "Domains:       block b1; rack r1, r2\n" in table.status_text(status, None, NOW)
    assert table.status_json(status, None, NOW)["domains"] == "block b1; rack r1, r2"


WAITING = {"demo-worker-0": "not scheduled: 0/3 nodes are available: pod has unbound immediate "
                            "PersistentVolumeClaims.",
           "demo-worker-1": "container worker: ErrImageNeverPull: Container image \"reg/base:1\" is not present "
                            "with pull policy of Never"}


def test_why_pods_wait_is_what_the_manager_last_said():
    pod = manager(annotations={"distributetrain.io/phase": "StartingWorkers", "distributetrain.io/plan": "a=1,b=1,c=1",
                               "distributetrain.io/waiting": json.dumps(WAITING)})
    status = state.from_manager(pod)
    assert status.waiting == tuple(WAITING.items())
    assert table.status_text(status, Progress(0, 2, ""), NOW) == (
        "Name:           demo\n"
        "Namespace:      ml\n"
        "Submitted as:   Pod\n"
        "Manager pod:    demo\n"
        "Phase:          StartingWorkers\n"
        "GPUs:           3 on 3 nodes (a=1,b=1,c=1)\n"
        "Age:            5m\n"
        "Workers Ready:  0/2\n"
        "Chief:          -\n"
        "Waiting:        demo-worker-0: not scheduled: 0/3 nodes are available: pod has unbound immediate "
        "PersistentVolumeClaims.\n"
        "                demo-worker-1: container worker: ErrImageNeverPull: Container image \"reg/base:1\" is not "
        "present with pull policy of Never\n"
        "Exit code:      -\n"
        "Reason:         -\n"
    )
    assert table.status_json(status, None, NOW)["waiting"] == WAITING


@pytest.mark.parametrize("annotation,phase", [("not json", "Running"), ('["a list"]', "Running"),
                                              (json.dumps(WAITING), "Failed")])
def test_no_waiting_from_an_unreadable_annotation_or_an_ended_manager(annotation, phase):
    assert state.waiting_of(manager(phase=phase, annotations={"distributetrain.io/waiting": annotation})) == ()


def test_restarts_are_shown_when_there_were_some():
    pod = manager(annotations={"distributetrain.io/phase": "Training", "distributetrain.io/restarts": "1",
                               "distributetrain.io/last-restart-reason": "pod demo-worker-0 was deleted"})
    status = state.from_manager(pod)
    assert (status.restarts, status.last_restart_reason) == (1, "pod demo-worker-0 was deleted")
    assert "Restarts:      1 (last: pod demo-worker-0 was deleted)\n" in table.status_text(status, None, NOW)
    assert table.status_json(status, None, NOW)["restarts"] == 1
    assert "Restarts" not in table.status_text(state.from_manager(manager()), None, NOW)


def test_a_queued_job_shows_its_place_in_the_queue_and_only_while_queued():
    queued = state.from_manager(manager(annotations={"distributetrain.io/phase": "Queued",
                                                     "distributetrain.io/queue-position": "2"}))
    started = state.from_manager(manager(annotations={"distributetrain.io/phase": "StartingWorkers",
                                                      "distributetrain.io/queue-position": "2"}))  # a late write
    assert (queued.queue_position, started.queue_position) == (2, None)
    assert table.job_table([queued, started], NOW, with_namespace=False).splitlines()[1:] == [
        "demo   Queued #2         6      -       5m    -      -",
        "demo   StartingWorkers   6      -       5m    -      -"]
    assert "Phase:         Queued (number 2 in its queue)\n" in table.status_text(queued, None, NOW)
    assert table.status_json(queued, None, NOW)["queuePosition"] == 2
    assert table.status_json(started, None, NOW)["queuePosition"] is None


def test_status_shows_a_pull_while_it_lasts():
    pulling = {"demo-worker-0": 'pulling image "distributetrain/base:0.1.0" on node-a for 2m10s'}
    pod = manager(annotations={"distributetrain.io/phase": "StartingWorkers", "distributetrain.io/plan": "a=1,b=1",
                               "distributetrain.io/waiting": json.dumps(pulling)})
    text = table.status_text(state.from_manager(pod), Progress(0, 1, "Pending"), NOW)
    assert 'Waiting:        demo-worker-0: pulling image "distributetrain/base:0.1.0" on node-a for 2m10s\n' in text
