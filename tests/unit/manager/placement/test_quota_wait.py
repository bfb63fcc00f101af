"""A ResourceQuota full for now (issue 33, item 5): with --wait-for-gpus the job releases
what it created, waits on the quota through one informer (no list loop), and tries again
once its used figures change so the job may fit; at the deadline, exit 73."""

import socket

import pytest

from distributetrain.core import errors
from distributetrain.core.placement import quotas
from distributetrain.core.clock import FakeClock
from distributetrain.core.settings import JobSettings
from distributetrain.kube import events
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.job import lifecycle
from distributetrain.manager.placement import quotawait
from distributetrain.manager.reporting.errorcodes import exit_code_of
from harness.builders import node
from harness.events import recording
from harness.kube import FakeKube

JOB = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="reg/base:1", owner_uid="uid-1",
                  wait_for_gpus_s=120.0)
GPU = "requests.nvidia.com/gpu"
REFUSAL = (f'pods "demo-chief" is forbidden: exceeded quota: gpus, requested: {GPU}=1, used: {GPU}=2, '
           f"limited: {GPU}=2")


def gpu_quota(used: str, hard: str = "2") -> dict:
    return {"kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": "ml"}, "spec": {"hard": {GPU: hard}},
            "status": {"hard": {GPU: hard}, "used": {GPU: used}}}


def test_only_an_exceeded_quota_is_a_refusal_that_may_pass():
    full = errors.forbidden(REFUSAL)
    assert isinstance(full, errors.QuotaFull) and (full.quota, exit_code_of(full)) == ("gpus", 73)
    assert str(full) == str(errors.QuotaExceeded(REFUSAL))  # the words of exit 73 are today's
    for never_passes in ('pods "x" is forbidden: failed quota: gpus: must specify limits.cpu',
                         'pods "x" is forbidden: maximum memory usage per Container is 4Gi, but limit is 8Gi'):
        refusal = errors.forbidden(never_passes)
        assert isinstance(refusal, errors.QuotaExceeded) and not isinstance(refusal, errors.QuotaFull)


def test_what_the_refusal_saw_and_what_is_missing_now():
    assert quotas.used_at_refusal(REFUSAL) == {GPU: "2"}
    assert quotas.used_at_refusal("exceeded quota: q, requested: requests.cpu=2,requests.memory=1Gi, "
                                  "used: requests.cpu=500m,requests.memory=3Gi, limited: requests.cpu=2") == {
        "requests.cpu": "500m", "requests.memory": "3Gi"}
    assert quotas.used_at_refusal("exceeded quota: q") == {}
    eight = JOB.replace(num_gpus=4)
    assert quotas.shortfalls(gpu_quota("6", hard="8"), eight) == [f"{GPU} used 6 of 8, the job needs 4"]
    assert quotas.shortfalls(gpu_quota("4", hard="8"), eight) == []
    memory = {"metadata": {"name": "m"}, "status": {"hard": {"requests.memory": "20Gi"},
                                                    "used": {"requests.memory": "6Gi"}}}
    assert quotas.shortfalls(memory, JOB.replace(memory_per_gpu_bytes=8 * 2**30)) == [
        "requests.memory used 6Gi of 20Gi, the job needs 16Gi"]


class Said:
    """The reporter's part the wait uses: its phase and Events (the job's recorder, on the fake Events API)."""

    def __init__(self, clock: FakeClock):
        self.phases = []
        self.events, self.api = recording(JOB, clock)

    def phase(self, phase):
        self.phases.append(phase)

    def recorded(self) -> list[tuple[str, str]]:
        self.events.close()
        return self.api.recorded()


def sent_after_the_list(kube: FakeKube, *changed: dict) -> None:
    """The quotas change once the wait has listed them: its watch sees the changes."""
    listed = kube.list_all

    def list_all(kind, namespace=None, **selectors):
        found = listed(kind, namespace, **selectors)
        if kind == "ResourceQuota":
            for quota in changed:
                kube.put(quota)
        return found

    kube.list_all = list_all


def waiting(kube: FakeKube, clock: FakeClock) -> tuple[quotawait.QuotaWait, Said]:
    said = Said(clock)
    return quotawait.QuotaWait(kube, JOB, said, clock), said


def test_a_quota_that_frees_mid_wait_ends_it_without_listing_again():
    clock = FakeClock()
    kube = FakeKube(clock=clock)
    kube.quotas = [gpu_quota("1")]  # the job's own pod released: 1 of 2 used, the job needs 2
    # Someone takes more (no room yet), then the other team's pod goes: the job may fit.
    sent_after_the_list(kube, gpu_quota("2"), gpu_quota("0"))
    wait, said = waiting(kube, clock)
    outcome = wait.wait(errors.forbidden(REFUSAL), clock.monotonic() + 60)
    assert outcome == quotawait.TryAgain(f"{GPU} used 0")
    assert said.phases == ["WaitingForQuota"]
    assert said.recorded() == [(jobevents.WAITING_FOR_QUOTA, f"waiting for quota gpus in ml: {GPU} used 1 of 2, the "
                                                          "job needs 2 (--wait-for-gpus 120s)")]
    assert (kube.quota_lists, kube.quota_watches, kube.pod_lists, kube.actions) == (1, 1, 0, [])
    assert clock.monotonic() == 1000.0  # woken by the watch, not a timer


def test_a_change_that_leaves_no_room_does_not_end_the_wait_and_the_deadline_does():
    clock = FakeClock()
    kube = FakeKube(clock=clock)
    kube.quotas = [gpu_quota("2")]
    sent_after_the_list(kube, gpu_quota("1"))  # used changed, but 1 + 2 > 2
    wait, _ = waiting(kube, clock)
    assert wait.wait(errors.forbidden(REFUSAL), 1090.0) == quotawait.StillFull()
    assert clock.monotonic() == 1090.0
    assert kube.quota_lists == 1  # one list, then the watch to the deadline: no list loop


def test_a_deleted_quota_ends_the_wait():
    clock = FakeClock()
    kube = FakeKube(clock=clock)
    wait, said = waiting(kube, clock)
    assert wait.wait(errors.forbidden(REFUSAL), 1060.0) == quotawait.TryAgain("it was deleted")
    assert said.recorded() == [(jobevents.WAITING_FOR_QUOTA, "waiting for quota gpus in ml: it refuses the job's pods "
                                                          "(--wait-for-gpus 120s)")]


def test_without_the_right_to_watch_quotas_it_retries_with_a_backoff_bounded_by_the_deadline():
    clock = FakeClock()
    kube = FakeKube(clock=clock)
    denied = errors.Forbidden('resourcequotas is forbidden: User "x" cannot list resource "resourcequotas"')
    kube.failures["list_pages"] = [denied] * 10
    wait, _ = waiting(kube, clock)
    full, until = errors.forbidden(REFUSAL), 1000.0 + 20
    outcomes, times = [], []
    while isinstance(outcome := wait.wait(full, until), quotawait.TryAgain):
        outcomes.append(outcome.why)
        times.append(clock.monotonic())
    assert outcomes == ["5s passed", "10s passed", "5s passed"]
    assert times == [1005.0, 1015.0, 1020.0]


def test_a_role_that_may_list_quotas_but_not_watch_them_retries_after_the_backoff():
    clock = FakeClock()
    kube = FakeKube(clock=clock)
    kube.quotas = [gpu_quota("2")]
    kube.failures["watch ResourceQuota"] = [errors.Forbidden(
        'resourcequotas is forbidden: User "x" cannot watch resource "resourcequotas"')]
    wait, said = waiting(kube, clock)
    assert wait.wait(errors.forbidden(REFUSAL), 1060.0) == quotawait.TryAgain("5s passed")
    assert clock.monotonic() == 1005.0 and kube.quota_lists == 1


# -- the whole job: refused, waits, tries again ---------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


RUNNING = {"phase": "Running", "podIP": "10.0.0.2", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                                   {"type": "Ready", "status": "True"}]}
CHIEF_DONE = {"phase": "Succeeded", "podIP": "10.0.0.3",
              "containerStatuses": [{"name": "chief", "state": {"terminated": {"exitCode": 0}}}]}


@pytest.fixture
def job(monkeypatch, tmp_path):
    """Runs the job on nodes a=1, b=1 whose chief's create a quota refuses once; returns
    (exit code, Event reasons, kube)."""
    recorded = []
    monkeypatch.setattr(events, "EventsApi", lambda api_client, clock: type("Api", (), {
        "create": lambda self, event: recorded.append(event["reason"]), "patch": lambda self, *a: None})())
    monkeypatch.setattr("distributetrain.manager.reporting.reporting.TERMINATION_LOG", str(tmp_path / "termination-log"))

    def run(settings, frees):
        kube = FakeKube([node("a", 1), node("b", 1)], clock=FakeClock())
        kube.quotas = [gpu_quota("1")]
        refusals = [errors.forbidden(REFUSAL)]  # the quota refuses the attempt's pods once
        create = kube.create_all_owned

        def create_all_owned(objs):
            if refusals and objs and objs[0]["kind"] == "Pod":
                raise refusals.pop()
            return create(objs)

        kube.create_all_owned = create_all_owned
        if frees:
            sent_after_the_list(kube, gpu_quota("0"))  # the other team's pod goes while the job waits
        kube.pod_watches = [[("demo-worker-0-r1", RUNNING), ("demo-chief-r1", RUNNING)],
                            [("demo-chief-r1", CHIEF_DONE)]]
        settings = settings.replace(discovery_url=f"http://127.0.0.1:{free_port()}/hosts")
        return lifecycle.execute(kube, settings, "run", kube.clock), recorded, kube

    return run


def test_a_job_refused_by_a_full_quota_waits_and_trains_once_it_frees(job):
    code, recorded, kube = job(JOB, frees=True)
    assert code == 0
    # The second, same plan adds to the first Planned Event's count.
    assert recorded == ["Planned", "Released", "WaitingForQuota", "WorkersCreated", "ChiefCreated",
                        "WorkersReady", "ChiefStarted", "Succeeded"]
    # The refused try's Secret released, then the next try under new names; one quota list in all.
    assert [action for action in kube.actions if action[1] == "Secret"][:3] == [
        ("create", "Secret", "demo-ssh"), ("delete", "Secret", "demo-ssh"), ("create", "Secret", "demo-ssh")]
    assert kube.writes("create", "Pod") == ["demo-worker-0-r1", "demo-chief-r1"]
    assert kube.quota_lists == 1


def test_without_wait_for_gpus_a_full_quota_ends_the_job_at_once_with_73(job):
    code, recorded, kube = job(JOB.replace(wait_for_gpus_s=0.0), frees=True)
    assert code == 73
    assert recorded == ["Planned", "Failed"]
    assert kube.quota_lists == 0 and kube.secrets == {}


def test_a_quota_that_never_frees_ends_the_job_with_73_at_the_deadline_and_leaves_nothing(job):
    # A wait of 0.3 s of real time: the job's deadline is measured on the manager's clock.
    code, recorded, kube = job(JOB.replace(wait_for_gpus_s=0.3), frees=False)
    assert code == 73
    assert recorded == ["Planned", "Released", "WaitingForQuota", "Failed"]
    assert kube.manager["metadata"]["annotations"]["distributetrain.io/exit-code"] == "73"
    assert "exceeded quota: gpus" in kube.manager["metadata"]["annotations"]["distributetrain.io/reason"]
    assert kube.pods == {} and kube.secrets == {} and kube.quota_lists == 1
