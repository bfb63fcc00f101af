"""An elastic job short of GPUs follows the Nodes for two reasons at once: a lost node
(``NodeWatch``) and a node that frees up (``FreeGpuWatch``). One Node informer serves both:
one list, one watch open at a time."""

import contextlib
import threading

from distributetrain.core import names
from distributetrain.core.clock import RealClock
from distributetrain.core.names import Attempt
from distributetrain.core.settings import JobSettings
from distributetrain.kube import waits
from distributetrain.kube.events import EventRecorder
from distributetrain.manager.placement import elastic
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.watching import podwaits
from distributetrain.manager.pods.discovery import HostList
from distributetrain.manager.watching.nodewatch import NodeWatch
from distributetrain.manager.processstate import ProcessState
from distributetrain.manager.reporting.reporting import Reporter
from harness.builders import make_pod, node
from harness.events import FakeEventsApi
from harness.kube import FakeKube
from harness.waiting import wait_until

SETTINGS = JobSettings(job_name="j", namespace="ns", num_gpus=4, image="img:1", min_gpus=1, owner_uid="uid-1",
                       discovery_url="http://10.0.0.1:8470/hosts")


def job_pod(name, role, index=None):
    labels = names.job_labels("j", role, "uid-1")
    if index is not None:
        labels[names.LABEL_WORKER_INDEX] = str(index)
    return {"metadata": {"name": name, "labels": labels, "annotations": {names.ANNOTATION_GPUS: "1"}},
            "status": {"phase": "Running", "podIP": "10.0.1.1", "conditions": [{"type": "Ready", "status": "True"}]}}


class OpenNodeWatches:
    """Counts the Node watches open at once on ``kube``, and the most ever open."""

    def __init__(self, kube):
        self.open = self.opened = self.most = 0
        self.lock = threading.Lock()
        self.watch = kube.watch
        kube.watch = self.watching

    def watching(self, kind, namespace, resource_version, timeout_s, **selectors):
        if kind != "Node":
            return self.watch(kind, namespace, resource_version, timeout_s, **selectors)
        return self._node_watch(resource_version, timeout_s)

    def _node_watch(self, resource_version, timeout_s):
        with self.lock:
            self.open += 1
            self.opened += 1
            self.most = max(self.most, self.open)
        try:
            yield from self.watch("Node", None, resource_version, timeout_s)
        finally:
            with self.lock:
                self.open -= 1


def test_an_elastic_job_short_of_gpus_under_the_node_watch_opens_one_node_watch():
    tenant = make_pod("other", "team-b").uid("uid-other").on("n").gpus(8).obj()  # every GPU of the node
    kube = FakeKube([node("n")], [job_pod("j-chief", names.ROLE_CHIEF),
                                  job_pod(names.worker_name("j", 0, 0), names.ROLE_WORKER, 0), tenant],
                    clock=RealClock())

    def chief_story(kube, timeout_s):
        # The chief ends once the follower, short of GPUs, follows the free GPUs beside the node watch.
        wait_until(lambda: follower.last_shortage and watches.opened >= 1, kube.changes, 10,
                   "the follower short of GPUs, following them")
        yield kube.apply("j-chief", {"phase": "Succeeded", "containerStatuses": [
            {"state": {"terminated": {"exitCode": 0}}}]})

    kube.on_pod_watch = chief_story
    watches = OpenNodeWatches(kube)
    reporter = Reporter(kube, SETTINGS, EventRecorder(SETTINGS, FakeEventsApi(), kube.clock, jobevents.KINDS))
    now = kube.clock.monotonic()
    state = ProcessState(SETTINGS, reporter, Attempt("j"), now + 30, now, HostList(), kube.clock,
                         waits.selected_pods(kube, SETTINGS.namespace, SETTINGS.selector, kube.clock))
    follower = elastic.ElasticFollower(kube, state, free_gpus_client=lambda same: same, recheck_s=0.05)
    try:
        with NodeWatch(kube, SETTINGS, reporter, kube.clock), contextlib.closing(state.pods):
            outcome = follower.follow()
    finally:
        reporter.events.close()
    assert outcome == podwaits.ChiefFinished(0)
    assert follower.last_shortage.startswith("2 GPUs short") and kube.writes("create", "Pod") == []
    assert watches.most == 1
    # The Nodes listed by the one informer, and by the booking that found no GPUs free.
    assert kube.node_lists == 2
