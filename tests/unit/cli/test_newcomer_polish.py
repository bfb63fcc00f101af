"""What a newcomer sees at a job's end and at a refused submission (issue 36, item 5):
`submit --follow` never says the job trains after its training ended, `status` of a
finished job says its workers were torn down (not that they are not Ready), and `submit`
refuses at once, creating nothing, a request the manager would refuse as bad input."""

import copy
from datetime import datetime, timezone

import pytest

from distributetrain.cli import main as cli
from distributetrain.cli.jobs import commands, connection, follow, manager_spec
from distributetrain.core import errors
from distributetrain.core.clock import FakeClock
from harness.builders import node
from harness.kube import FakeKube
from harness.streams import TextSink

SUBMIT = ["submit", "--image", "img", "--name", "demo", "--namespace", "ml"]
CREATED = "2026-01-02T11:55:00Z"
TRAINED = {"distributetrain.io/phase": "Succeeded", "distributetrain.io/plan": "a=1,b=1",
           "distributetrain.io/exit-code": "0", "distributetrain.io/reason": "training finished"}


NOW = datetime(2026, 1, 2, 12, 0, tzinfo=timezone.utc)


class CliKube(FakeKube):
    """The fake cluster as the user's commands call it: the manager pod among the job's
    pods, the chief's output, and nodes the user may list, or not (``nodes_forbidden``)."""

    def __init__(self, nodes=(), pods=(), chief_output="", after_output=lambda kube: None):
        super().__init__(nodes=nodes, pods=pods, clock=FakeClock(wall_start=NOW.timestamp()))
        self.nodes_forbidden = False
        self.chief_output = chief_output
        self.after_output = after_output  # what the manager wrote while the output streamed
        self.created = []

    def list_pages(self, kind, namespace=None, **selectors):
        if kind == "Node" and self.nodes_forbidden:
            raise errors.forbidden('nodes is forbidden: User "dev" cannot list resource "nodes" at the cluster scope')
        yield from super().list_pages(kind, namespace, **selectors)

    def read(self, kind, namespace, name):
        return None if kind == "Job" else super().read(kind, namespace, name)

    def create(self, obj, dry_run=False):
        if not dry_run:
            self.created.append(obj)
        return copy.deepcopy(obj)

    def pod_log(self, namespace, pod, container, follow):
        yield from self.chief_output.splitlines(keepends=True)
        self.after_output(self)


def manager(phase="Running", annotations=None, exit_code=None):
    args = cli.build_parser().parse_args([*SUBMIT, "--num-gpus", "2"])
    pod = manager_spec.manager_pod(*commands.submission(args, []))
    pod["metadata"].update(creationTimestamp=CREATED, annotations=dict(annotations or {}))
    pod["status"] = {"phase": phase}
    if exit_code is not None:
        pod["status"]["containerStatuses"] = [{"name": "manager", "state": {"terminated": {"exitCode": exit_code}}}]
    return pod


def child(role, name, phase="Running", ready=False):
    labels = {"app.kubernetes.io/name": "distributetrain", "distributetrain.io/job": "demo",
              "distributetrain.io/role": role}
    if role == "worker":
        labels["distributetrain.io/worker-index"] = name.rsplit("-", 1)[-1]
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ml", "labels": labels},
            "spec": {}, "status": {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_follow_never_says_training_once_the_training_output_ended():
    # As on a cluster: the manager records Training once it sees the chief run, which is
    # while its output streams; the chief's pod says it ended a moment after its output.
    starting = {"distributetrain.io/phase": "StartingWorkers", "distributetrain.io/plan": "a=1,b=1"}
    worker = child("worker", "demo-worker-0", ready=True)

    def manager_records_training(kube):
        kube.pods["demo"]["metadata"]["annotations"]["distributetrain.io/phase"] = "Training"

    kube = CliKube(pods=[manager(annotations=starting), worker, child("chief", "demo-chief", phase="Pending")],
                   chief_output="epoch 1\nepoch 2\n", after_output=manager_records_training)
    kube.pod_watches = [
        [("demo-chief", {"phase": "Running"})],
        [("demo-chief", {"phase": "Succeeded"}), ("DELETED", worker),
         ("MODIFIED", manager(phase="Succeeded", annotations=TRAINED, exit_code=0))],
    ]
    code = follow.Follower(kube, "ml", "demo", terminal := TextSink(), terminal, kube.clock).follow()
    assert code == 0
    assert terminal.text.splitlines() == [
        "demo: manager pod demo: Running",
        "demo: phase: StartingWorkers",
        "demo: plan: 2 GPUs on 2 nodes (a=1,b=1, the chief's share last)",
        "demo: workers Ready: 1/1",
        "demo: chief demo-chief: Pending",
        "demo: chief demo-chief: Running",
        "demo: phase: Training",  # as the manager records it, on the same sight of the chief
        "epoch 1",
        "epoch 2",
        "demo: chief demo-chief: Succeeded",
        "demo: phase: TearingDown",
        "demo: workers: 1 of 1 being torn down",
        "demo: workers: 1, torn down after the chief ended",
        "demo: manager pod demo: Succeeded",
        "demo: phase: Succeeded",
        "demo: Succeeded, exit code 0: training finished",
    ]


def run(capsys, monkeypatch, kube, *argv):
    monkeypatch.setattr(connection, "connect", lambda args, clock: kube)
    code = cli.dispatch([*argv, "--namespace", "ml"] if argv[0] != "submit" else list(argv), kube.clock)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_status_of_a_finished_job_says_its_workers_were_torn_down(capsys, monkeypatch):
    kube = CliKube(pods=[manager(phase="Succeeded", annotations=TRAINED, exit_code=0),
                         child("chief", "demo-chief", phase="Succeeded")])
    code, out, err = run(capsys, monkeypatch, kube, "status", "demo")
    assert (code, err) == (0, "")
    assert out == (
        "Name:          demo\n"
        "Namespace:     ml\n"
        "Submitted as:  Pod\n"
        "Manager pod:   demo\n"
        "Phase:         Succeeded\n"
        "GPUs:          2 on 2 nodes (a=1,b=1)\n"
        "Age:           5m\n"
        "Workers:       1, torn down after the chief ended\n"
        "Chief:         Succeeded\n"
        "Exit code:     0\n"
        "Reason:        training finished\n"
    )


def test_status_of_a_job_that_failed_before_training_says_its_workers_went_with_it(capsys, monkeypatch):
    failed = {**TRAINED, "distributetrain.io/phase": "Failed", "distributetrain.io/exit-code": "75",
              "distributetrain.io/reason": "pods not Ready within 300s; released them"}
    kube = CliKube(pods=[manager(phase="Failed", annotations=failed, exit_code=75)])
    code, out, err = run(capsys, monkeypatch, kube, "status", "demo")
    assert (code, err) == (0, "")
    assert "Workers:       1, torn down after the job ended\n" in out and "Workers Ready" not in out


def test_status_of_a_job_whose_chief_ended_says_it_is_tearing_down(capsys, monkeypatch):
    training = {"distributetrain.io/phase": "Training", "distributetrain.io/plan": "a=1,b=1"}
    kube = CliKube(pods=[manager(annotations=training), child("chief", "demo-chief", phase="Succeeded"),
                         child("worker", "demo-worker-0", ready=True)])
    code, out, err = run(capsys, monkeypatch, kube, "status", "demo")
    assert (code, err) == (0, "")
    assert "Phase:         TearingDown\n" in out and "Workers:       1 of 1 being torn down\n" in out


SIX_GPUS = [node("a", 2), node("b", 2), node("c", 2)]


@pytest.mark.parametrize("flags,says", [
    (["--num-gpus", "9"], "--num-gpus: requested 9 GPUs but the cluster's nodes advertise 6 in all"),
    (["--num-gpus", "2", "--gpu-resource", "amd.com/gpu"],
     "--gpu-resource: no node in the cluster advertises 'amd.com/gpu'; where an autoscaler adds GPU nodes (a node "
     "pool scaled to zero), --scale-up-node-gpus N with --wait-for-gpus makes it add them"),
    (["--num-gpus", "4", "--node-selector", "pool=big"],
     "--num-gpus: requested 4 GPUs but the nodes matching --node-selector advertise 0 in all"),
])
def test_submit_refuses_at_once_what_the_nodes_could_never_hold(capsys, monkeypatch, flags, says):
    kube = CliKube(nodes=SIX_GPUS)
    code, out, err = run(capsys, monkeypatch, kube, *SUBMIT, *flags)
    assert (code, out, err) == (2, "", f"distributetrain: error: {says}\n")
    assert kube.created == [] and kube.actions == []


def test_submit_where_the_user_may_not_list_nodes_leaves_the_check_to_the_manager(capsys, monkeypatch):
    kube = CliKube(nodes=SIX_GPUS)
    kube.nodes_forbidden = True
    code, out, err = run(capsys, monkeypatch, kube, *SUBMIT, "--num-gpus", "9")
    assert (code, out) == (0, "demo\n"), err
    assert [obj["metadata"]["name"] for obj in kube.created] == ["demo"]


def test_submit_of_a_request_the_nodes_can_hold_creates_the_manager(capsys, monkeypatch):
    kube = CliKube(nodes=SIX_GPUS)
    code, out, err = run(capsys, monkeypatch, kube, *SUBMIT, "--num-gpus", "6")
    assert (code, out) == (0, "demo\n"), err
    assert [obj["metadata"]["name"] for obj in kube.created] == ["demo"]
