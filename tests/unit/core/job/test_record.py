"""The job's record: what the manager writes on its pod reads back the same, for the
manager and the command line alike; mangled annotations read as not recorded."""

from hypothesis import given, strategies as st

from distributetrain.core import names
from distributetrain.core.job import record
from distributetrain.core.job.record import JobRecord
from distributetrain.core.settings import JobSettings
from harness.strategies import DIGITS, LOWER, names as name_strings

plans = st.lists(st.tuples(name_strings(first=LOWER, rest=LOWER + DIGITS + "-", max_size=10), st.integers(1, 16)),
                 min_size=1, max_size=6)
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=1200)


def pod_after(*changes: dict) -> dict:
    """A manager pod after merge-patching each change in turn (None removes a key)."""
    annotations: dict = {}
    for change in changes:
        for key, value in change.items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
    return {"metadata": {"name": "job", "annotations": annotations}}


@given(plan=plans, attempt=st.integers(0, 50), used=st.integers(0, 50), cause=texts,
       waiting=st.dictionaries(name_strings("job-worker-", first=DIGITS, max_size=0), texts, max_size=3))
def test_what_the_manager_writes_reads_back(plan, attempt, used, cause, waiting):
    pod = pod_after(record.planned(plan), record.attempt(attempt), record.waiting(waiting),
                    record.restarting(used, cause, attempt + 1))
    assert JobRecord.of(pod) == JobRecord(
        phase="Restarting", plan=tuple(plan), attempt=attempt + 1, restarts=used,
        last_restart_reason=cause[:record.MAX_REASON_CHARS],
        waiting=tuple((pod, why[:record.MAX_WAITING_REASON_CHARS]) for pod, why in waiting.items()))


@given(exit_code=st.integers(-1, 255), reason=texts)
def test_an_outcome_ends_the_waiting_and_reads_as_finished(exit_code, reason):
    got = JobRecord.of(pod_after(record.waiting({"job-chief": "pulling"}), record.finished(exit_code, reason)))
    assert (got.phase, got.exit_code, got.reason, got.waiting) == (
        "Succeeded" if exit_code == 0 else "Failed", exit_code, reason[:record.MAX_REASON_CHARS], ())
    assert got.finished


def test_a_pod_without_a_record_or_with_a_mangled_one_reads_as_nothing_recorded():
    assert JobRecord.of({}) == JobRecord.of({"metadata": {"annotations": None}}) == JobRecord()
    mangled = {names.ANNOTATION_ATTEMPT: "two", names.ANNOTATION_RESTARTS: "-1", names.ANNOTATION_EXIT_CODE: "x",
               names.ANNOTATION_PLAN: "a=", names.ANNOTATION_WAITING: "{not json", names.ANNOTATION_SPEC: "[]"}
    assert JobRecord.of({"metadata": {"annotations": mangled}}) == JobRecord()
    assert not JobRecord(phase="Training").finished


def test_the_spec_the_manager_writes_reads_back_beside_its_record():
    settings = JobSettings(job_name="job", namespace="ml", num_gpus=4, image="img:1", owner_uid="u", max_restarts=2)
    assert JobRecord.of(pod_after(record.phase("Planning"), record.spec(settings))) == JobRecord(
        phase="Planning", spec=settings)


def test_the_plans_domains_read_back_and_go_with_a_plan_without_them():
    pod = pod_after(record.planned([("a", 2)], "block b1; rack r1"))
    assert JobRecord.of(pod).domains == "block b1; rack r1"
    assert JobRecord.of(pod_after(record.planned([("a", 2)], "rack r1"), record.planned([("b", 2)]))).domains == ""
