"""The commands end to end on an in-memory cluster: what they call, print and return."""

import copy
import json
from datetime import datetime, timezone

import pytest

from distributetrain.cli import main as cli
from distributetrain.cli.jobs import commands, connection, follow, manager_spec
from distributetrain.core import errors
from distributetrain.core.clock import FakeClock
from harness.kube import FakeKube
from harness.streams import TextSink

NOW = datetime(2026, 1, 2, 12, 0, 0, tzinfo=timezone.utc)
CREATED = "2026-01-02T11:55:00Z"


def manager(name="demo", phase="Running", annotations=None, exit_code=None, pod_name=None):
    """A manager pod as `submit` creates it (``pod_name``: a Job's generated pod)."""
    args = cli.build_parser().parse_args(["submit", "--num-gpus", "2", "--image", "img", "--namespace", "ml",
                                          "--name", name])
    pod = manager_spec.manager_pod(*commands.submission(args, []))
    pod["metadata"].update(creationTimestamp=CREATED, annotations=annotations or {})
    if pod_name:
        pod["metadata"]["name"] = pod_name
        pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": name, "uid": "job-uid"}]
    pod["status"] = {"phase": phase}
    if exit_code is not None:
        pod["status"]["containerStatuses"] = [{"name": "manager", "state": {"terminated": {"exitCode": exit_code}}}]
    return pod


def batch_job(name="demo"):
    args = cli.build_parser().parse_args(["submit", "--num-gpus", "2", "--image", "img", "--namespace", "ml",
                                          "--name", name, "--as-job"])
    job = manager_spec.manager_job(*commands.submission(args, []))
    job["metadata"]["creationTimestamp"] = CREATED
    return job


def child(job, role, name=None, phase="Running", ready=False, kind="Pod"):
    labels = {"app.kubernetes.io/name": "distributetrain", "distributetrain.io/job": job,
              "distributetrain.io/role": role}
    if role == "worker":
        labels["distributetrain.io/worker-index"] = (name or "0").split("-worker-")[-1].split("-")[0]
    return {"kind": kind, "metadata": {"name": name or f"{job}-{role}", "namespace": "ml", "labels": labels},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}}


def running_job(job="demo"):
    return [child(job, "worker", f"{job}-worker-0", ready=True), child(job, "chief"),
            child(job, "ssh", f"{job}-ssh", kind="Secret")]


PLANNED = {"distributetrain.io/phase": "Training", "distributetrain.io/plan": "a=1,b=1"}


@pytest.fixture
def kube(monkeypatch):
    fake = FakeKube(in_manager_pod=False, clock=FakeClock(wall_start=NOW.timestamp()))
    fake.forbidden_lists = {"Node"}  # this user may not list nodes: submit leaves their check to the manager
    monkeypatch.setattr(connection, "connect", lambda args, clock: fake)
    return fake


def run(capsys, kube, *argv):
    code = cli.dispatch([*argv, "--namespace", "ml"] if "--" not in argv else list(argv), kube.clock)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_submit_creates_the_manager_and_prints_the_name(capsys, kube):
    code, out, err = run(capsys, kube, "submit", "--num-gpus", "2", "--image", "img", "--name", "demo")
    assert (code, out) == (0, "demo\n")
    args = cli.build_parser().parse_args(["submit", "--num-gpus", "2", "--image", "img", "--name", "demo",
                                          "--namespace", "ml"])
    assert kube.created == [manager_spec.manager_pod(*commands.submission(args, []))]


def refused_once(error):
    """A webhook that refuses the first object it is sent (the manager's dry run)."""
    sent = []

    def admit(obj):
        sent.append(obj)
        if len(sent) == 1:
            raise error

    return admit


@pytest.mark.parametrize("refusal,code,out", [
    (errors.ApiError('admission webhook "w.example.com" does not support dry run'), 0, "demo\n"),
    (errors.NotFound('namespaces "ml" not found'), 76, ""),
])
def test_a_dry_run_only_a_webhook_refuses_is_taken_as_outside_kueue(capsys, kube, refusal, code, out):
    kube.on_create.append(refused_once(refusal))
    assert run(capsys, kube, "submit", "--num-gpus", "2", "--image", "img", "--name", "demo")[:2] == (code, out)


def test_submit_refuses_a_claim_that_does_not_exist_before_it_creates_anything(capsys, kube):
    code, out, err = run(capsys, kube, "submit", "--num-gpus", "2", "--image", "img", "--name", "demo", "--pvc", "data:/d")
    assert (code, out, kube.created) == (2, "", [])
    assert err == ("distributetrain: error: --pvc: no PersistentVolumeClaim 'data' in namespace 'ml' "
                   "(CLAIM:/PATH[:ro] names a claim of the job's namespace)\n")


@pytest.mark.parametrize("existing", [manager(), batch_job(), manager(pod_name="demo-x7k2p")])
@pytest.mark.parametrize("as_job", [[], ["--as-job"]])
def test_submit_refuses_a_name_in_use_however_it_was_submitted(capsys, kube, existing, as_job):
    kube.put(existing)
    code, out, err = run(capsys, kube, "submit", "--num-gpus", "2", "--image", "img", "--name", "demo", *as_job)
    assert (code, out, kube.created) == (2, "", [])
    assert err == "distributetrain: error: --name: a job named 'demo' already exists in namespace 'ml'\n"


def test_list_shows_jobs_however_they_were_submitted(capsys, kube):
    from_yaml = manager(name="distributetrain-manager")
    del from_yaml["metadata"]["labels"]["distributetrain.io/job"]
    for obj in [manager("pod-job", annotations=PLANNED), batch_job("batch-job"),
                manager("batch-job", pod_name="batch-job-x7k2p", phase="Succeeded", exit_code=0),
                batch_job("no-pod-yet"), from_yaml, *running_job("pod-job"),
                child("batch-job-x7k2p", "chief", phase="Succeeded")]:
        kube.put(obj)
    code, out, err = run(capsys, kube, "list")
    assert (code, err) == (0, "")
    assert out == (
        "NAME                      PHASE       GPUS   NODES     AGE   EXIT   REASON\n"
        "batch-job                 Succeeded   2      -         5m    0      -\n"
        "distributetrain-manager   Running     2      -         5m    -      -\n"
        "no-pod-yet                Pending     2      -         5m    -      waiting for the Job controller to create the manager pod\n"
        "pod-job                   Training    2      a=1,b=1   5m    -      -\n"
    )


def test_list_of_nothing_says_so(capsys, kube):
    assert run(capsys, kube, "list") == (0, "", "No jobs in namespace ml.\n")


def test_status_of_a_batch_job_follows_its_pods_generated_name(capsys, kube):
    for obj in [batch_job(), manager(pod_name="demo-x7k2p", annotations=PLANNED), *running_job("demo-x7k2p")]:
        kube.put(obj)
    code, out, err = run(capsys, kube, "status", "demo")
    assert (code, err) == (0, "")
    assert out == (
        "Name:           demo\n"
        "Namespace:      ml\n"
        "Submitted as:   Job\n"
        "Manager pod:    demo-x7k2p\n"
        "Phase:          Training\n"
        "GPUs:           2 on 2 nodes (a=1,b=1)\n"
        "Age:            5m\n"
        "Workers Ready:  1/1\n"
        "Chief:          Running\n"
        "Exit code:      -\n"
        "Reason:         -\n"
    )


def test_status_of_no_such_job(capsys, kube):
    assert run(capsys, kube, "status", "ghost") == (
        1, "", "distributetrain: error: no job 'ghost' in namespace 'ml' (see 'distributetrain list')\n")


def test_logs_are_the_chiefs_or_the_managers(capsys, kube):
    for obj in [manager(), *running_job()]:
        kube.put(obj)
    kube.logs = {("demo-chief", "chief"): "epoch 1\nepoch 2\n", ("demo", "manager"): "planning\n"}
    assert run(capsys, kube, "logs", "demo") == (0, "epoch 1\nepoch 2\n", "")
    assert run(capsys, kube, "logs", "demo", "--manager", "-f") == (0, "planning\n", "")


def test_logs_of_one_rank(capsys, kube):
    for obj in [manager(), *running_job()]:
        kube.put(obj)
    kube.logs = {("demo-chief", "chief"): "chief: SSH to 10.0.0.2 works\n[0]<stdout>:rank=0 size=2\n"
                                          "[1]<stdout>:rank=1 size=2\n[1]<stderr>:warning\n[0]<stdout>:done\n"}
    assert run(capsys, kube, "logs", "demo", "--rank", "1") == (0, "rank=1 size=2\nwarning\n", "")
    assert run(capsys, kube, "logs", "demo", "--rank", "0", "-f") == (0, "rank=0 size=2\ndone\n", "")
    assert run(capsys, kube, "logs", "demo", "--rank", "2") == (0, "", "")


@pytest.mark.parametrize("argv,message", [
    (["--rank", "one"], "--rank: must be a Horovod rank, a whole number from 0 (e.g. 1), got 'one'"),
    (["--rank", "1", "--manager"], "--rank: selects lines of the chief's output (the training), not the manager's"),
])
def test_bad_rank_is_refused_before_connecting(capsys, kube, monkeypatch, argv, message):
    monkeypatch.setattr(connection, "connect", lambda args, clock: pytest.fail("connected before checking --rank"))
    assert run(capsys, kube, "logs", "demo", *argv) == (2, "", f"distributetrain: error: {message}\n")


def test_logs_before_the_chief_exists(capsys, kube):
    kube.put(manager(annotations={"distributetrain.io/phase": "Planning"}))
    assert run(capsys, kube, "logs", "demo") == (1, "", "distributetrain: error: job 'demo' has no chief pod (Planning); "
                                                  "see 'distributetrain logs --manager demo'\n")


def test_cancel_deletes_the_manager_and_confirms_everything_is_gone(capsys, kube):
    for obj in [manager(), *running_job()]:
        kube.put(obj)
    code, out, err = run(capsys, kube, "cancel", "demo")
    assert (code, err, kube.actions) == (0, "", [("delete", "Pod", "demo")])
    assert out == "deleted pod/demo\ndeleted pod/demo-chief\ndeleted pod/demo-worker-0\ndeleted secret/demo-ssh\n"
    assert (kube.pods, kube.batch_jobs, kube.secrets) == ({}, {}, {})


def test_cancel_of_a_batch_job_deletes_the_job(capsys, kube):
    for obj in [batch_job(), manager(pod_name="demo-x7k2p"), *running_job("demo-x7k2p")]:
        kube.put(obj)
    code, out, err = run(capsys, kube, "cancel", "demo")
    assert (code, err, kube.actions) == (0, "", [("delete", "Job", "demo")])
    assert out.splitlines() == ["deleted job/demo", "deleted pod/demo-x7k2p", "deleted pod/demo-x7k2p-chief",
                                "deleted pod/demo-x7k2p-worker-0", "deleted secret/demo-x7k2p-ssh"]


def test_cancel_says_what_is_left_at_its_deadline(capsys, kube):
    for obj in [manager(), *running_job()]:
        kube.put(obj)
    kube.stuck = {"demo-chief"}
    code, out, err = run(capsys, kube, "cancel", "demo", "--timeout", "1s")
    assert (code, out) == (75, "deleted pod/demo\ndeleted pod/demo-worker-0\ndeleted secret/demo-ssh\n")
    assert err == "distributetrain: error: still there after 1s: pod/demo-chief\n"


def annotated(pod, **annotations):
    pod = copy.deepcopy(pod)
    pod["metadata"]["annotations"].update(annotations)
    return pod


def test_follow_shows_progress_streams_the_chief_and_exits_with_the_jobs_code(capsys, kube):
    job = manager(phase="Pending")
    running = manager()
    planned = annotated(running, **{"distributetrain.io/phase": "StartingWorkers",
                                    "distributetrain.io/plan": "a=1,b=1"})
    worker = child("demo", "worker", "demo-worker-0", phase="Pending")
    unschedulable = {"demo-worker-0": "not scheduled: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}
    waiting = annotated(planned, **{"distributetrain.io/waiting": json.dumps(unschedulable)})
    kube.pod_watches = [
        [("MODIFIED", running)],
        [("MODIFIED", planned), ("ADDED", worker), ("MODIFIED", waiting),
         ("MODIFIED", annotated(waiting, **{"distributetrain.io/waiting": json.dumps(unschedulable)})),
         ("MODIFIED", planned), ("MODIFIED", waiting), ("MODIFIED", planned),
         ("MODIFIED", child("demo", "worker", "demo-worker-0", ready=True)),
         ("ADDED", child("demo", "chief", phase="Pending")),
         ("MODIFIED", annotated(planned, **{"distributetrain.io/phase": "Training"})),
         ("MODIFIED", child("demo", "chief"))],
        [("DELETED", worker), ("MODIFIED", child("demo", "chief", phase="Failed")),
         ("MODIFIED", annotated(manager(phase="Failed", exit_code=3), **{
             "distributetrain.io/phase": "Failed", "distributetrain.io/reason": "chief exited with code 3"}))],
    ]
    kube.logs = {("demo-chief", "chief"): "epoch 1\nTraceback\n"}
    kube.create = lambda obj, dry_run=False: obj if dry_run else kube.put(job)
    code, out, err = run(capsys, kube, "submit", "--num-gpus", "2", "--image", "img", "--name", "demo", "--follow")
    assert (code, out) == (3, "demo\nepoch 1\nTraceback\n")
    assert err.splitlines() == [
        "demo: manager pod demo: waiting for the scheduler",
        "demo: manager pod demo: Running",
        "demo: phase: StartingWorkers",
        "demo: plan: 2 GPUs on 2 nodes (a=1,b=1, the chief's share last)",
        "demo: workers Ready: 0/1",
        # Once per change: the same reason again is news only after the pod stopped waiting.
        "demo: demo-worker-0 waits: not scheduled: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
        "demo: demo-worker-0 waits: not scheduled: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
        "demo: workers Ready: 1/1",
        "demo: chief demo-chief: Pending",
        "demo: phase: Training",
        "demo: chief demo-chief: Running",
        "demo: workers Ready: 0/1",
        "demo: chief demo-chief: Failed",
        "demo: phase: TearingDown",  # the chief ended: the manager records Failed once it tore the job down
        "demo: workers: 1, torn down after the chief ended",
        "demo: manager pod demo: Failed",
        "demo: phase: Failed",
        "demo: Failed, exit code 3: chief exited with code 3",
    ]


def test_follow_of_a_job_that_fails_before_training(capsys, kube):
    kube.put(manager())
    kube.pod_watches = [[("MODIFIED", annotated(manager(phase="Failed", exit_code=69), **{
        "distributetrain.io/phase": "Failed", "distributetrain.io/reason": "requested 2 GPUs but only 1 is free"}))]]
    code = follow.Follower(kube, "ml", "demo", out := TextSink(), err := TextSink(), kube.clock).follow()
    assert (code, out.text) == (69, "")
    assert err.text.splitlines()[-1] == "demo: Failed, exit code 69: requested 2 GPUs but only 1 is free"


def test_follow_of_a_batch_job_waits_for_its_pod_and_sees_it_deleted(capsys, kube):
    kube.put(batch_job())
    pod = manager(pod_name="demo-x7k2p")
    kube.pod_watches = [[("ADDED", pod)], [("DELETED", pod)]]
    code = follow.Follower(kube, "ml", "demo", TextSink(), err := TextSink(), kube.clock).follow()
    assert code == 143
    assert err.text.splitlines() == ["demo: manager pod demo-x7k2p: Running",
                                     "demo: the manager pod was deleted: the job is cancelled"]


def test_follow_gives_up_on_a_manager_that_never_starts(kube):
    kube.put(manager(phase="Pending"))
    code = follow.Follower(kube, "ml", "demo", TextSink(), err := TextSink(), kube.clock,
                           manager_start_timeout_s=0.0).follow()
    assert code == 75
    assert "did not start within 0s" in err.text


def kueue_queues_every_pod(obj):
    """Kueue's pod webhook under manageJobsWithoutQueueName: every pod gets its gate."""
    if obj["kind"] == "Pod":
        obj["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    return obj


@pytest.mark.parametrize("as_job", [[], ["--as-job"]])
def test_where_kueue_queues_every_pod_the_manager_joins_the_jobs_queue_asking_no_quota(capsys, kube, as_job):
    kube.on_create = [kueue_queues_every_pod]
    argv = ["submit", "--num-gpus", "2", "--image", "img", "--name", "demo", "--queue", "team", *as_job]
    code, out, err = run(capsys, kube, *argv)
    assert (code, out) == (0, "demo\n"), err
    settings, options = commands.submission(cli.build_parser().parse_args([*argv, "--namespace", "ml"]), [])
    assert kube.created == [manager_spec.in_queue(manager_spec.manager_object(settings, options), "team")]
    # The probe is always the manager's pod, which Kueue's pod webhook judges.
    assert kube.dry_runs == [manager_spec.manager_pod(settings, options)]


def test_the_manager_in_a_queue_asks_for_no_quota_and_is_labelled_with_the_queue():
    args = cli.build_parser().parse_args(["submit", "--num-gpus", "2", "--image", "img", "--name", "demo",
                                          "--namespace", "ml", "--queue", "team", "--as-job"])
    settings, options = commands.submission(args, [])
    job = manager_spec.manager_object(settings, options)
    queued = manager_spec.in_queue(job, "team")
    expected = copy.deepcopy(job)
    expected["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team"
    template = expected["spec"]["template"]
    template["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team"
    template["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "0", "memory": "0"},
                                                      "limits": {"memory": "512Mi"}}
    assert queued == expected
    assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"], "in_queue changed its argument"


@pytest.mark.parametrize("node_lists", [{"Node"}, set()], ids=["nodes-unreadable", "no-gpu-node"])
def test_where_kueue_queues_every_pod_a_job_without_a_queue_is_refused(capsys, kube, node_lists):
    """Said before what the nodes lack: bad input whatever the nodes are (queued, a job may
    wait for nodes an autoscaler adds)."""
    kube.forbidden_lists = node_lists
    kube.on_create = [kueue_queues_every_pod]
    code, out, err = run(capsys, kube, "submit", "--num-gpus", "2", "--image", "img", "--name", "demo")
    assert (code, out, kube.created) == (2, "", [])
    assert err == ("distributetrain: error: --queue: Kueue queues every pod in namespace 'ml': "
                   "name the job's LocalQueue, --queue=NAME\n")


def test_outside_kueue_the_manager_is_unchanged_queue_or_not(capsys, kube):
    code, out, err = run(capsys, kube, "submit", "--num-gpus", "2", "--image", "img", "--name", "demo", "--queue", "team")
    assert code == 0, err
    args = cli.build_parser().parse_args(["submit", "--num-gpus", "2", "--image", "img", "--name", "demo",
                                          "--queue", "team", "--namespace", "ml"])
    assert kube.created == [manager_spec.manager_pod(*commands.submission(args, []))]


def test_follow_says_where_a_queued_job_is_in_its_queue_as_it_moves():
    lines = follow.ProgressLines("demo")

    def manager(phase, position=None):
        annotations = {"distributetrain.io/phase": phase}
        if position is not None:
            annotations["distributetrain.io/queue-position"] = str(position)
        return {"metadata": {"name": "demo", "annotations": annotations}, "status": {"phase": "Running"}}

    assert lines.update(manager("Queued"), []) == ["demo: manager pod demo: Running", "demo: phase: Queued"]
    assert lines.update(manager("Queued", 3), []) == ["demo: number 3 in its queue"]
    assert lines.update(manager("Queued", 3), []) == []
    assert lines.update(manager("Queued", 1), []) == ["demo: number 1 in its queue"]
    assert lines.update(manager("StartingWorkers", 1), []) == ["demo: phase: StartingWorkers"]  # a late write
    assert lines.update(manager("Queued", 1), []) == ["demo: phase: Queued", "demo: number 1 in its queue"]  # again


def test_follow_shows_a_slow_start_when_it_begins_and_then_once_a_minute():
    lines = follow.ProgressLines("demo")

    def manager(why):
        annotations = {"distributetrain.io/phase": "StartingWorkers",
                       "distributetrain.io/waiting": json.dumps({"demo-worker-0": why})}
        return {"metadata": {"name": "demo", "annotations": annotations}, "status": {"phase": "Running"}}

    pulling = 'pulling image "reg/base:1" on a for '
    assert lines.update(manager(pulling + "0s"), [])[-1] == f"demo: demo-worker-0 waits: {pulling}0s"
    assert lines.update(manager(pulling + "50s"), []) == []
    assert lines.update(manager(pulling + "1m10s"), []) == [f"demo: demo-worker-0 waits: {pulling}1m10s"]
    assert lines.update(manager(pulling + "1m50s"), []) == []
    assert lines.update(manager("container worker: ContainerCreating"), []) == [
        "demo: demo-worker-0 waits: container worker: ContainerCreating"]


def test_follow_says_which_network_domains_the_plan_got():
    annotations = {"distributetrain.io/phase": "StartingWorkers", "distributetrain.io/plan": "a=2,b=1",
                   "distributetrain.io/domains": "block b1; rack r2"}
    manager = {"metadata": {"name": "demo", "annotations": annotations}, "status": {"phase": "Running"}}
    assert "demo: plan: 3 GPUs on 2 nodes in block b1; rack r2 (a=2,b=1, the chief's share last)" in \
        follow.ProgressLines("demo").update(manager, [])
