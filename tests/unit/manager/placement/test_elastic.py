"""Elastic jobs: what discovery answers, when the manager acts, and the host list's server."""

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distributetrain.cli import main as cli, jobflags
from distributetrain.core import errors, names
from distributetrain.core.pods import manifests
from distributetrain.core.placement import placement
from distributetrain.core.clock import Clock, FakeClock, RealClock
from distributetrain.core.names import Attempt
from distributetrain.core.settings import JobSettings
from distributetrain.core.watching.startbudget import StartBudgets
from distributetrain.core.watching.startprogress import Pulling
from distributetrain.kube import waits
from distributetrain.kube.events import EventRecorder
from distributetrain.manager.placement import booking, elastic
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.watching import podwaits
from distributetrain.manager.pods.discovery import HostList
from distributetrain.manager.reporting.reporting import Reporter
from distributetrain.manager.processstate import ProcessState
from harness.builders import make_pod, node, sized_node, tenant
from harness.events import FakeEventsApi
from harness.kube import FakeKube
from harness.waiting import wait_until

SETTINGS = JobSettings(job_name="j", namespace="ns", num_gpus=4, image="img:1", min_gpus=2,
                       discovery_url="http://10.0.0.1:8470/hosts")
FIRST = Attempt("j")


def pod(name, role, gpus, phase="Running", ready=True, ip="", index=None, exit_code=None, deleting=False):
    labels = names.job_labels("j", role, "uid-1")  # as the manager of FOLLOWED created it
    if index is not None:
        labels[names.LABEL_WORKER_INDEX] = str(index)
    metadata = {"name": name, "labels": labels, "annotations": {names.ANNOTATION_GPUS: str(gpus)}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"phase": phase, "podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if exit_code is not None:
        status["containerStatuses"] = [{"state": {"terminated": {"exitCode": exit_code}}}]
    return {"metadata": metadata, "status": status}


def chief(**kwargs):
    return pod("j-chief", names.ROLE_CHIEF, 1, ip="10.0.1.1", **kwargs)


def worker(index, gpus=1, attempt=0, **kwargs):
    kwargs.setdefault("ip", f"10.0.2.{index}")
    return pod(names.worker_name("j", index, attempt), names.ROLE_WORKER, gpus, index=index, **kwargs)


def by_name(*pods):
    return {p["metadata"]["name"]: p for p in pods}


def test_hosts_are_the_ready_workers_with_their_shares():
    pods = by_name(chief(), worker(0, gpus=2), worker(1, ready=False), worker(2), worker(3, deleting=True),
                   worker(4, phase="Failed", exit_code=137))
    assert elastic.ready_hosts(pods, FIRST) == (("10.0.2.0", 2), ("10.0.2.2", 1))


def test_workers_of_another_attempt_are_not_hosts():
    pods = by_name(chief(), worker(0), worker(1, attempt=1))
    assert elastic.ready_hosts(pods, FIRST) == (("10.0.2.0", 1),)


def test_judge_reports_a_change_of_hosts_and_nothing_else():
    pods = by_name(chief(), worker(0), worker(1))
    hosts = elastic.ready_hosts(pods, FIRST)
    assert elastic.judge_elastic(SETTINGS, FIRST, ())(pods) == elastic.HostsChanged(hosts, 3)
    assert elastic.judge_elastic(SETTINGS, FIRST, hosts)(pods) is None
    del pods[names.worker_name("j", 1, 0)]
    assert elastic.judge_elastic(SETTINGS, FIRST, hosts)(pods) == elastic.HostsChanged(hosts[:1], 2)


def test_a_lost_worker_is_not_the_end_but_a_lost_chief_is():
    pods = by_name(chief(deleting=True), worker(0))
    assert elastic.judge_elastic(SETTINGS, FIRST, ())(pods) == podwaits.PodLost("j-chief", "is being deleted")
    assert elastic.judge_elastic(SETTINGS, FIRST, ())(by_name(worker(0))) == podwaits.PodLost("j-chief", "was deleted")


def test_the_chief_exit_code_ends_the_job():
    pods = by_name(chief(phase="Succeeded", exit_code=0), worker(0))
    assert elastic.judge_elastic(SETTINGS, FIRST, ())(pods) == podwaits.ChiefFinished(0)
    pods = by_name(chief(phase="Failed", exit_code=1), worker(0), worker(1))  # 3 GPUs left >= min 2
    assert elastic.judge_elastic(SETTINGS, FIRST, ())(pods) == podwaits.ChiefFinished(1)


def test_a_chief_failing_below_min_gpus_is_blamed_on_the_lost_workers():
    pods = by_name(chief(phase="Failed", exit_code=1), worker(0, phase="Failed", exit_code=137))
    outcome = elastic.judge_elastic(SETTINGS, FIRST, ())(pods)
    assert isinstance(outcome, podwaits.PodLost) and "1 of --min-gpus 2" in outcome.reason


def test_replacements_never_reuse_an_index():
    pods = by_name(chief(), worker(0), worker(3, deleting=True))
    assert elastic.next_worker_index(pods) == 4
    assert elastic.next_worker_index(by_name(chief())) == 0


@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 8), min_size=1), st.integers(2, 20))
def test_an_elastic_plan_always_has_a_worker_and_the_same_gpus(free, gpus):
    try:
        plan = placement.plan(free, gpus)
    except placement.InsufficientGPUs:
        return
    split = placement.with_a_worker(plan)
    assert len(split) >= 2
    assert sum(share for _, share in split) == gpus
    assert all(share >= 1 for _, share in split)
    for used in {n for n, _ in split}:
        assert sum(s for n, s in split if n == used) <= free[used]


def parsed(*flags):
    args = cli.build_parser().parse_args(["run", "--job-name=j", "--namespace=ns", "--image=img:1", *flags])
    return jobflags.settings_from_args(args, [])


@pytest.mark.parametrize("flags, flag", [
    (["--num-gpus=4", "--min-gpus=2"], "--min-gpus"),  # without --elastic
    (["--num-gpus=1", "--elastic"], "--elastic"),  # one GPU cannot shrink
    (["--num-gpus=4", "--elastic", "--min-gpus=5"], "--min-gpus"),
    (["--num-gpus=4", "--elastic", "--min-gpus=0"], "--min-gpus"),
    (["--num-gpus=4", "--elastic", "--elastic-timeout=soon"], "--elastic-timeout"),
    (["--num-gpus=4", "--elastic", "--gloo-timeout=500ms"], "--gloo-timeout"),  # Horovod takes whole seconds
])
def test_bad_elastic_flags_name_the_flag(flags, flag):
    with pytest.raises(errors.UsageError) as bad:
        parsed(*flags)
    assert bad.value.flag == flag


def test_elastic_flags_and_the_managers_address(monkeypatch):
    assert parsed("--num-gpus=4").min_gpus == 0
    monkeypatch.delenv(jobflags.ENV_POD_IP, raising=False)
    settings = parsed("--num-gpus=4", "--elastic")
    assert (settings.min_gpus, settings.elastic_timeout_s, settings.discovery_url) == (1, 600.0, "")
    monkeypatch.setenv(jobflags.ENV_POD_IP, "10.0.0.9")
    settings = parsed("--num-gpus=4", "--elastic", "--min-gpus=3", "--elastic-timeout=2m")
    assert (settings.min_gpus, settings.elastic_timeout_s, settings.discovery_url) == \
        (3, 120.0, "http://10.0.0.9:8470/hosts")


def test_the_elastic_chief_gets_horovods_bounds_and_where_to_ask():
    chief = manifests.chief_pod(SETTINGS, "n", 1)
    env = {e["name"]: e.get("value") for e in chief["spec"]["containers"][0]["env"]}
    assert {k: env[k] for k in ("DT_NUM_PROCS", "DT_MIN_PROCS", "DT_HOSTS_URL", "DT_ELASTIC_TIMEOUT",
                                "DT_GLOO_TIMEOUT")} == \
        {"DT_NUM_PROCS": "4", "DT_MIN_PROCS": "2", "DT_HOSTS_URL": "http://10.0.0.1:8470/hosts",
         "DT_ELASTIC_TIMEOUT": "600", "DT_GLOO_TIMEOUT": "120"}
    # Horovod takes whole seconds: a fraction is rounded up, never to a shorter wait.
    fractional = manifests.chief_pod(SETTINGS.replace(gloo_timeout_s=1.5), "n", 1)
    assert {"name": "DT_GLOO_TIMEOUT", "value": "2"} in fractional["spec"]["containers"][0]["env"]
    # A static chief gets no elastic bounds; its ranks' rendezvous waits the Gloo timeout too.
    static = manifests.chief_pod(SETTINGS.replace(min_gpus=0), "n", 1)
    static_env = static["spec"]["containers"][0]["env"]
    assert not any(e["name"].startswith(("DT_MIN", "DT_ELASTIC")) for e in static_env)
    assert {"name": "DT_GLOO_TIMEOUT", "value": "120"} in static_env


def test_a_worker_not_ready_past_the_timeout_is_overdue_and_ready_again_is_forgotten():
    settings = SETTINGS.replace(worker_ready_timeout_s=60)
    budgets = StartBudgets(settings)
    pods = by_name(chief(), worker(0), worker(1, ready=False), worker(2, ready=False, deleting=True))

    def overdue(now):
        return elastic.overdue_workers(pods, settings, budgets, elastic.waiting_workers(pods, FIRST), {}, now)

    assert elastic.waiting_workers(pods, FIRST) == ["j-worker-1"]  # a terminating worker holds nothing to free
    assert overdue(100.0) == {}
    assert overdue(159.9) == {}
    assert list(overdue(160.0)) == ["j-worker-1"]
    assert overdue(160.0)["j-worker-1"].startswith("not Ready within --worker-ready-timeout 60s (")
    pods["j-worker-1"] = worker(1)
    assert overdue(161.0) == {}
    pods["j-worker-1"] = worker(1, ready=False)
    assert overdue(200.0) == {}  # a new wait starts now
    assert overdue(259.9) == {}


def test_a_replacement_pulling_its_image_is_not_late_until_its_pull_runs_past_its_bound():
    settings = SETTINGS.replace(worker_ready_timeout_s=60, image_pull_timeout_s=600)
    budgets = StartBudgets(settings)
    pods = by_name(chief(), worker(0), worker(1, ready=False))
    pulling = {"j-worker-1": (Pulling("reg/base:1", "n2"), 110.0)}

    def overdue(now, slow):
        return elastic.overdue_workers(pods, settings, budgets, ["j-worker-1"], slow, now)

    assert overdue(100.0, {}) == {}  # 10 s of the timeout spent before the pull shows
    assert overdue(110.0, pulling) == {}
    assert overdue(500.0, pulling) == {}  # a 6-minute pull: past --worker-ready-timeout, still fine
    assert overdue(709.9, pulling) == {}
    assert overdue(710.0, pulling) == {"j-worker-1": 'pulling image "reg/base:1" on n2 for 10m0s'}
    # Pulled, the container does not get Ready: the timeout runs on from its 10 s.
    assert overdue(720.0, {}) == {}
    assert overdue(769.9, {}) == {}
    assert list(overdue(770.0, {})) == ["j-worker-1"]


# -- growing back is best effort: the follower on an in-memory API -----------------------


def follower_kube(pods, chief_ends_when=lambda kube: False, clock: Clock | None = None):
    """The job's pods and one 8-GPU node; the chief succeeds once ``chief_ends_when(kube)``.
    Time is ``clock``'s, a fake one the job's pod watch moves unless given."""
    kube = FakeKube([node("n")], pods, clock=clock or FakeClock())

    def chief_story(kube, timeout_s):
        ends_at = kube.clock.monotonic() + timeout_s
        while kube.clock.monotonic() < ends_at:
            if chief_ends_when(kube) and kube.pods["j-chief"]["status"]["phase"] == "Running":
                yield kube.apply("j-chief", chief(phase="Succeeded", exit_code=0)["status"])
                return
            kube.clock.sleep(0.01)

    kube.on_pod_watch = chief_story
    return kube


def replacements(kube):
    return kube.writes("create", "Pod")


FOLLOWED = SETTINGS.replace(owner_uid="uid-1", min_gpus=1)


def follow(kube, settings=FOLLOWED, recheck_s=0.05):
    """Runs the follower to the chief's end (or the attempt's deadline, 30 s on); returns
    (outcome, Events recorded)."""
    api = FakeEventsApi()
    reporter = Reporter(kube, settings, EventRecorder(settings, api, kube.clock, jobevents.KINDS))
    now = kube.clock.monotonic()
    state = ProcessState(settings, reporter, Attempt(settings.job_name), now + 30, now, HostList(), kube.clock,
                         waits.selected_pods(kube, settings.namespace, settings.selector, kube.clock))
    # The free GPUs are followed on the fake itself (a real manager opens a client of its own).
    # Rechecks and retries a hundred and fifty times as often as the manager's: a story lasts a few seconds.
    follower = elastic.ElasticFollower(kube, state, free_gpus_client=lambda same: same, recheck_s=recheck_s,
                                       backoff_max_s=0.2)
    try:
        outcome = follower.follow()
    finally:
        state.pods.close()  # as the job's loop does at its end
        reporter.events.close()  # sends what is still queued
    return outcome, api.notes()


def short_of_two_gpus(chief_ends_when=lambda kube: False):
    """4 GPUs asked, 2 left (the chief and worker 0): replacements are due at once."""
    return follower_kube([chief(), worker(0)], chief_ends_when)


@pytest.mark.parametrize("call, failure", [
    ("create_all_owned", errors.QuotaExceeded("exceeded quota: gpus, requested: requests.nvidia.com/gpu=2, used: 4, limited: 4")),
    ("create_all_owned", errors.Forbidden('pods is forbidden: User "system:serviceaccount:ns:dt" cannot create resource')),
    ("create_all_owned", errors.Invalid("Pod \"j-worker-1\" is invalid: spec.containers[0].image: Required value")),
    ("list_pages", errors.TransientApiError("the API server stayed unreachable for 30s: connection refused")),
], ids=["quota", "forbidden", "invalid", "apiserver-outage"])
def test_a_failed_replacement_is_retried_and_the_job_goes_on(call, failure):
    kube = short_of_two_gpus(chief_ends_when=replacements)  # once the grow-back succeeds
    kube.failures = {call: [failure, failure]}
    outcome, recorded = follow(kube)
    assert outcome == podwaits.ChiefFinished(0)
    assert replacements(kube) == ["j-worker-1"]  # the missing 2 GPUs, on the one node, after two failures
    failed = [note for reason, note in recorded if reason == jobevents.REPLACE_FAILED]
    assert failed and all(str(failure) in note for note in failed)


def pulling_event(pod_name):
    return {"reason": "Pulling", "message": 'Pulling image "reg/base:1"', "lastTimestamp": "2026-11-26T20:00:00Z",
            "source": {"host": "n"}, "involvedObject": {"kind": "Pod", "name": pod_name},
            "metadata": {"name": f"{pod_name}.pulling"}}


@pytest.mark.parametrize("events, deleted", [([pulling_event("j-worker-1")], []), ([], ["j-worker-1"])],
                         ids=["pulling", "stuck"])
def test_a_replacement_pulling_its_image_outlives_the_timeout_one_that_is_stuck_does_not(events, deleted):
    kube = short_of_two_gpus()
    kube.events = events  # the kubelet's, about the replacement
    shown = set()

    def replacement_story(kube, timeout_s):
        """The replacement shows on the watch, never Ready; the chief ends a second after its
        creation. Every watch the follower opens (one per wake) goes on with the story."""
        ends_at = kube.clock.monotonic() + timeout_s
        while kube.clock.monotonic() < ends_at:
            created = replacements(kube)
            if created and "j-worker-1" in kube.pods and not shown:
                shown.add("j-worker-1")
                yield kube.apply("j-worker-1", {"phase": "Pending"})
            if created and kube.clock.monotonic() - kube.when("create", "Pod", "j-worker-1") >= 1.0:
                yield kube.apply("j-chief", chief(phase="Succeeded", exit_code=0)["status"])
                return
            kube.clock.sleep(0.01)
            yield "BOOKMARK", {"metadata": {"resourceVersion": "1"}}  # time goes on for the follower too

    kube.on_pod_watch = replacement_story
    outcome, _ = follow(kube, FOLLOWED.replace(worker_ready_timeout_s=0.3))
    assert outcome == podwaits.ChiefFinished(0)
    assert kube.writes("delete", "Pod")[:1] == deleted


def test_a_busy_lease_is_retried_later_and_the_job_goes_on(monkeypatch):
    monkeypatch.setattr(booking, "LOCK_TIMEOUT_S", 0.1)
    kube = short_of_two_gpus(chief_ends_when=replacements)
    # Another manager holds the Lease for half a second, then releases it.
    kube.lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                  "metadata": {"name": names.LOCK_LEASE_NAME, "namespace": "default", "resourceVersion": "5"},
                  "spec": {"holderIdentity": "ns/other", "leaseDurationSeconds": 30, "acquireTime": "x"}}
    released_at = kube.clock.monotonic() + 0.5
    read = kube.read

    def read_lease(kind, namespace, name):
        if kind == "Lease" and kube.clock.monotonic() >= released_at and kube.lease["spec"]["holderIdentity"] == "ns/other":
            kube.lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": kube.lease["metadata"] | {"resourceVersion": "6"},
                          "spec": {"holderIdentity": None, "leaseDurationSeconds": 30}}
        return read(kind, namespace, name)

    kube.read = read_lease
    outcome, recorded = follow(kube)
    assert outcome == podwaits.ChiefFinished(0) and replacements(kube) == ["j-worker-1"]
    assert any(reason == jobevents.REPLACE_FAILED and "could not take the placement lock" in note
               for reason, note in recorded)


def test_a_lease_taken_over_while_replacing_is_not_the_end_of_the_job():
    kube = short_of_two_gpus(chief_ends_when=replacements)
    create = kube.create_all_owned

    def create_while_another_manager_takes_the_lease(objs):
        kube.lease["spec"] = {"holderIdentity": "ns/other", "leaseDurationSeconds": 30, "acquireTime": "x"}
        kube.lease["metadata"]["resourceVersion"] = "99"
        return create(objs)

    kube.create_all_owned = create_while_another_manager_takes_the_lease
    outcome, recorded = follow(kube)
    assert outcome == podwaits.ChiefFinished(0)
    assert any(reason == jobevents.REPLACE_FAILED and "may have been held by another manager" in note
               for reason, note in recorded)


def test_an_overdue_worker_not_deleted_for_an_outage_is_deleted_later():
    kube = follower_kube([chief(), worker(0), worker(1, ready=False)],
                         chief_ends_when=lambda kube: bool(kube.writes("delete")))
    # A deletion's first call annotates the pod with its cause.
    kube.failures = {"annotate Pod": [errors.TransientApiError("the API server stayed unreachable for 30s")]}
    outcome, recorded = follow(kube, FOLLOWED.replace(num_gpus=3, worker_ready_timeout_s=0.1))
    assert outcome == podwaits.ChiefFinished(0) and kube.writes("delete") == ["j-worker-1"]
    assert any(reason == jobevents.REPLACE_FAILED and "j-worker-1" in note for reason, note in recorded)


@given(st.integers(1, 100))
def test_growing_back_backs_off_after_failures_in_a_row_within_bounds(failures):
    delay = elastic.retry_delay(failures)
    assert elastic.REPLACE_RECHECK_S <= delay <= elastic.REPLACE_BACKOFF_MAX_S
    if failures == 1:
        assert delay == elastic.REPLACE_RECHECK_S  # the first retry: the usual recheck
    else:
        assert delay >= elastic.retry_delay(failures - 1)


@pytest.mark.parametrize("failure", [errors.Cancelled("received SIGTERM"), KeyError("spec")],
                         ids=["sigterm", "programming-error"])
def test_sigterm_and_programming_errors_still_end_the_follower(failure):
    kube = short_of_two_gpus()
    kube.failures = {"create_all_owned": [failure]}
    with pytest.raises(type(failure)):
        follow(kube)


def tenant_pod(gpus=8):
    """Another tenant's pod holding the node's GPUs."""
    return make_pod("other", "team-b").uid("uid-other").on("n").gpus(gpus).obj()


def freed_once_followed(kube: FakeKube) -> threading.Thread:
    """The tenant's GPUs freed, on a thread of their own, once the job follows the free
    GPUs (its watch of every namespace's pods open): a change it can only learn of from
    that watch."""
    def free() -> None:
        wait_until(lambda: kube.cluster_pod_watches, kube.changes, 5, "the free GPUs followed")
        kube.remove(tenant_pod())

    thread = threading.Thread(target=free, daemon=True)
    thread.start()
    return thread


def test_a_job_short_of_gpus_lists_nothing_while_nothing_changes():
    ends_at = time.monotonic() + 0.6  # a dozen rechecks (0.05 s each here)
    # Real time: the free GPUs' informers, on threads of their own, list meanwhile.
    kube = follower_kube([chief(), worker(0), tenant_pod()], chief_ends_when=lambda kube: time.monotonic() > ends_at,
                         clock=RealClock())
    outcome, _ = follow(kube)
    assert outcome == podwaits.ChiefFinished(0) and replacements(kube) == []
    # One booking (the nodes and every pod outside the Lease, and under it the Lease's
    # queue; the bookings since the survey from the journal it began) found nothing free;
    # then the job's pods' informer and the free GPUs' informers listed once each, and
    # nothing after.
    assert (kube.node_lists, kube.pod_lists) == (2, 4)
    assert kube.writes(kind="Lease") == [names.LOCK_LEASE_NAME] * 2  # the Lease taken once, let go once


def test_a_job_short_of_gpus_books_again_once_gpus_are_freed():
    # Real time: the GPUs are freed on a thread of their own, once the job follows them.
    kube = follower_kube([chief(), worker(0), tenant_pod()], chief_ends_when=replacements, clock=RealClock())
    freed = freed_once_followed(kube)
    outcome, _ = follow(kube)
    freed.join()
    assert outcome == podwaits.ChiefFinished(0) and replacements(kube) == ["j-worker-1"]
    assert kube.node_lists == 3  # the fresh inventory, the informer's list, the fresh inventory once freed


def test_a_job_short_of_gpus_books_as_gpus_are_freed_not_at_its_next_recheck():
    """The freed GPUs wake the follower: with a recheck past the attempt's deadline, only
    that wake can grow the job back before the deadline ends it."""
    kube = follower_kube([chief(), worker(0), tenant_pod()], chief_ends_when=replacements, clock=RealClock())
    freed = freed_once_followed(kube)
    outcome, _ = follow(kube, recheck_s=3600)
    freed.join()
    assert outcome == podwaits.ChiefFinished(0) and replacements(kube) == ["j-worker-1"]


def test_a_job_whose_free_gpus_lack_cpu_books_again_only_on_a_change():
    """The followed free GPUs say a replacement fits (they count GPUs only), the booking
    finds no node with the CPU for it: the job books once more as the free GPUs are first
    listed, then not again while nothing changes (not at every recheck)."""
    ends_at = time.monotonic() + 0.6  # a dozen rechecks (0.05 s each here)
    kube = follower_kube([chief(), worker(0), tenant("n", cpu="1")], clock=RealClock(),
                         chief_ends_when=lambda kube: time.monotonic() > ends_at)
    kube.nodes["n"] = sized_node("n", 8, cpu="1")  # a 1-GPU pod asks 2 CPUs (--cpu-per-gpu)
    outcome, _ = follow(kube)
    assert outcome == podwaits.ChiefFinished(0) and replacements(kube) == []
    assert kube.writes(kind="Lease") == [names.LOCK_LEASE_NAME] * 4  # two bookings, each took and let go the Lease
