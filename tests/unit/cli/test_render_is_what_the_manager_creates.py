"""``render`` prints what the manager creates: the objects of a job's first attempt, made
by the manager's own placement (``pretraining.placement_of``: direct or queued) on the in-memory fake
with the nodes of ``--nodes``, compared whole with render's output."""

import copy

import pytest
import yaml

from distributetrain.cli import main as cli, jobflags, render
from distributetrain.core import errors
from distributetrain.core.pods import podgroup
from distributetrain.core.clock import FakeClock
from distributetrain.core.names import Attempt
from distributetrain.kube import waits
from distributetrain.kube.events import EventRecorder
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.placement import queueing
from distributetrain.manager.pods.discovery import HostList
from distributetrain.manager.placement.kinds import kind_of
from distributetrain.manager.job.pretraining import placement_of
from distributetrain.manager.processstate import ProcessState
from distributetrain.manager.reporting.reporting import Reporter
from harness.builders import manager_pod, node
from harness.events import FakeEventsApi
from harness.kube import FakeKube

JOB = ["--image", "reg/base:1", "--job-name", "demo", "--namespace", "ml"]
NODES = "gpu-a=5,gpu-b=3,gpu-c=2"
RACK = "network.topology.kubernetes.io/rack"

CASES = {
    "static": ["--num-gpus", "6", "--nodes", NODES],
    "elastic": ["--num-gpus", "4", "--nodes", "gpu-a=4", "--elastic"],
    "queued": ["--num-gpus", "6", "--nodes", NODES, "--queue", "team-a", "--priority-class", "high",
               "--active-deadline", "1h"],
    "topology": ["--num-gpus", "7", "--nodes", NODES, "--topology", RACK],
    "scale-up": ["--num-gpus", "12", "--nodes", "gpu-a=4", "--scale-up-node-gpus", "8", "--wait-for-gpus", "5m"],
}



def kueue_gates(obj):
    """Kueue's mutating webhook on a pod that names a queue: gated until admitted."""
    if obj["kind"] == "Pod" and podgroup.QUEUE_LABEL in obj["metadata"].get("labels", {}):
        obj["spec"]["schedulingGates"] = [*obj["spec"].get("schedulingGates", []), {"name": "kueue.x-k8s.io/admission"}]


def rendered(capsys, flags):
    assert cli.main(["render", *flags]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def created_by_the_manager(monkeypatch, flags):
    """The objects the manager's placement creates for the job's first attempt, in order, as sent."""
    settings = jobflags.settings_from_args(cli.build_parser().parse_args(["render", *flags]), [])
    settings = settings.replace(discovery_url="http://<manager pod IP>:8470/hosts")
    monkeypatch.setattr("distributetrain.core.pods.sshkeys.JobKeys.generate", lambda job_name: render.PLACEHOLDER_KEYS)
    monkeypatch.setattr(queueing.secrets, "token_hex", lambda size: render.PLACEHOLDER_GROUP_TOKEN)
    nodes = [node(name, int(gpus)) for name, gpus in (term.split("=") for term in flags[flags.index("--nodes") + 1]
                                                      .split(","))]
    clock = FakeClock()
    kube = FakeKube(nodes, manager=manager_pod("demo", namespace="ml", uid=""), clock=clock)
    kube.custom[("localqueues", "ml", "team-a")] = {"spec": {"clusterQueue": "gpus"}}
    sent = []  # each object as the manager sends it, before Kueue's webhook holds the queued pods back
    kube.on_create += [lambda obj: sent.append(copy.deepcopy(obj)), kueue_gates]
    reporter = Reporter(kube, settings, EventRecorder(settings, FakeEventsApi(), clock, jobevents.KINDS))
    now = clock.monotonic()
    # A queued job: created, then queued past its deadline (Kueue admits nothing here).
    deadline = now if settings.queue else now + 3600
    state = ProcessState(settings, reporter, Attempt("demo"), deadline=deadline, gpus_until=now + settings.wait_for_gpus_s,
                         hosts=HostList(), clock=clock,
                         pods=waits.selected_pods(kube, settings.namespace, settings.selector, clock))
    placement = placement_of(kube, state, kind_of(settings))
    if settings.queue:
        with pytest.raises(errors.JobFailed, match="not admitted"):
            placement.place()
    else:
        placement.place()
    return [obj for obj in sent if obj["metadata"]["namespace"] == "ml"]  # not the Leases, nor the shared survey


@pytest.mark.parametrize("case", CASES)
def test_render_prints_the_objects_the_manager_creates(case, capsys, monkeypatch):
    flags = [*CASES[case], *JOB]
    assert rendered(capsys, flags) == created_by_the_manager(monkeypatch, flags)

