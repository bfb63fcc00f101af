"""The informer: one list, then a watch resumed from the last version; a fresh list only
on 410 Gone or a failed watch (after a delay); a store and handlers; waits with a typed
outcome, on a fake clock (no test here sleeps)."""

import threading

from distributetrain.core import errors
from distributetrain.core.clock import FakeClock, RealClock
from distributetrain.kube.informer import Change, DeadlineReached, Informer, Satisfied
from harness.builders import make_pod
from harness.kube import FakeKube
from harness.waiting import WatchedClock


def pod(name, version="1", phase="Running", namespace="ns"):
    return make_pod(name, namespace).version(version).labels({"job": "j"}).phase(phase).obj()


def bookmark(version):
    return {"metadata": {"resourceVersion": version}}


class RecordingKube(FakeKube):
    """The fake, keeping the resourceVersion each watch starts from."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.watched_from: list[str] = []

    def watch(self, kind, namespace, resource_version, timeout_s, **selectors):
        self.watched_from.append(resource_version)
        return super().watch(kind, namespace, resource_version, timeout_s, **selectors)


def pods_informer(kube, clock, **kwargs):
    return Informer(kube, "Pod", "ns", selectors={"label_selector": "job=j"}, clock=clock, **kwargs)


def phase_of(name, phase):
    return lambda pods: True if name in pods and pods[name]["status"]["phase"] == phase else None


def test_lists_then_watches_from_the_lists_version_and_resumes_from_the_last_seen():
    clock = FakeClock()
    kube = RecordingKube(pods=[pod("a")], clock=clock)
    kube.pod_watches = [[("ADDED", pod("b", "5")), ("BOOKMARK", bookmark("7"))], [("MODIFIED", pod("a", "9", "Failed"))]]
    informer = pods_informer(kube, clock)
    outcome = informer.wait_until(phase_of("a", "Failed"), clock.monotonic() + 60)
    assert outcome == Satisfied(True)
    assert kube.pod_lists == 1
    # The list's version, then the bookmark's: a bookmark moves the version on, and is no object.
    assert kube.watched_from == ["1", "7"]
    assert sorted(informer.store) == ["a", "b"] and informer.version == "9"


def test_after_a_relist_the_next_wait_judges_a_fresh_list_with_what_the_caller_just_created():
    """What the caller itself just created may not have come through the watch yet: absent
    from the store, it would read as deleted. After ``relist`` the next wait judges a fresh
    list, and the one after it the store again."""
    clock = FakeClock()
    kube = FakeKube(pods=[pod("a")], clock=clock)
    informer = pods_informer(kube, clock)
    assert informer.wait_until(sorted, clock.monotonic() + 60) == Satisfied(["a"])
    kube.pods["b"] = pod("b", "2")  # created; no watch has delivered it
    assert informer.wait_until(sorted, clock.monotonic() + 60) == Satisfied(["a"])
    informer.relist()
    assert informer.stale
    assert informer.wait_until(sorted, clock.monotonic() + 60) == Satisfied(["a", "b"])
    assert informer.wait_until(sorted, clock.monotonic() + 60) == Satisfied(["a", "b"])
    assert (kube.pod_lists, informer.stale) == (2, False)


def test_on_its_own_thread_too_a_relist_has_the_next_wait_judge_a_fresh_list():
    """The thread, in a watch when asked, lists afresh once that watch call ends; until
    then a wait judges nothing (here the watch delivers nothing: it ends at its span)."""
    clock = RealClock()
    kube = FakeKube(pods=[pod("a")], clock=clock)
    with pods_informer(kube, clock, thread_span_s=0.05) as informer:
        assert informer.wait_until(sorted, clock.monotonic() + 10) == Satisfied(["a"])
        kube.pods["b"] = pod("b", "2")  # created; no watch delivers it
        informer.relist()
        assert informer.wait_until(sorted, clock.monotonic() + 10) == Satisfied(["a", "b"])


def test_a_deleted_object_leaves_the_store_and_handlers_get_each_change():
    clock = FakeClock()
    kube = FakeKube(pods=[pod("a"), pod("b")], clock=clock)
    kube.pod_watches = [[("DELETED", pod("a", "3")), ("MODIFIED", pod("b", "4", "Succeeded"))]]
    informer = pods_informer(kube, clock)
    batches = []
    informer.add_handler(lambda changes: batches.append([(c.type, c.key) for c in changes]))
    informer.wait_until(phase_of("b", "Succeeded"), clock.monotonic() + 60)
    assert batches == [[("ADDED", "a"), ("ADDED", "b")], [("DELETED", "a")], [("MODIFIED", "b")]]
    assert list(informer.store) == ["b"]


def test_gone_lists_again_at_once_and_hands_on_only_the_differences():
    clock = FakeClock()
    kube = FakeKube(pods=[pod("a")], clock=clock)
    started = clock.monotonic()

    def meanwhile(fake):  # while the watch was away: b came, a went
        fake.pods = {"b": pod("b", "8")}
        raise errors.Gone("too old resource version")

    kube.on_pod_watch = lambda fake, timeout_s: iter(meanwhile(fake) or ())
    informer = pods_informer(kube, clock, relist_delay_s=60.0)  # what a failed watch would wait
    changes = []
    informer.add_handler(changes.extend)
    informer.wait_until(lambda pods: True if "b" in pods else None, started + 60)
    assert [(c.type, c.key) for c in changes] == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b")]
    assert kube.pod_lists == 2 and clock.monotonic() == started


def test_a_failed_watch_lists_again_after_the_delay_never_aborts():
    clock = FakeClock()
    kube = FakeKube(pods=[pod("a")], clock=clock)
    kube.pod_watches = [[errors.TransientApiError("the watch ended with an error (500)")],
                        [("MODIFIED", pod("a", "4", "Failed"))]]
    informer = pods_informer(kube, clock, relist_delay_s=0.5)
    started = clock.monotonic()
    assert informer.wait_until(phase_of("a", "Failed"), started + 60) == Satisfied(True)
    assert kube.pod_lists == 2 and clock.monotonic() - started == 0.5


def test_a_failed_list_is_tried_again_after_the_delay():
    clock = FakeClock()
    kube = FakeKube(pods=[pod("a")], clock=clock)
    kube.failures["list_pages"] = [errors.TransientApiError("connection refused")]
    informer = pods_informer(kube, clock, relist_delay_s=0.5)
    assert informer.wait_until(lambda pods: len(pods) or None, clock.monotonic() + 60) == Satisfied(1)


def test_an_error_that_is_not_transient_is_raised_to_the_waiter():
    clock = FakeClock()
    kube = FakeKube(pods=[pod("a")], clock=clock)
    kube.failures["list_pages"] = [errors.forbidden("pods is forbidden")]
    informer = pods_informer(kube, clock)
    try:
        informer.wait_until(lambda pods: None, clock.monotonic() + 60)
    except errors.Forbidden:
        pass
    else:
        raise AssertionError("a missing permission was not raised")


def test_the_deadline_gives_the_last_view_without_sleeping():
    clock = FakeClock()
    kube = FakeKube(pods=[pod("a")], clock=clock)  # nothing scripted: the watch waits out its time
    informer = pods_informer(kube, clock)
    started = clock.monotonic()
    outcome = informer.wait_until(lambda pods: None, started + 30)
    assert isinstance(outcome, DeadlineReached) and list(outcome.last_view) == ["a"]
    assert clock.monotonic() == started + 30 and kube.pod_lists == 1


def test_a_watch_of_bookmarks_only_still_ends_at_the_deadline():
    """A quiet watch past its caller's deadline: the wait returns at the first bookmark
    after it, not at the watch's own end, so a follower's periodic work is never held up."""
    clock = FakeClock()
    kube = FakeKube(pods=[pod("a")], clock=clock)
    a_minute_later = lambda fake: clock.advance(60) or ("BOOKMARK", bookmark("2"))  # noqa: E731
    kube.pod_watches = [[a_minute_later] * 10]
    informer = pods_informer(kube, clock)
    started = clock.monotonic()
    outcome = informer.wait_until(lambda pods: None, started + 30)
    assert isinstance(outcome, DeadlineReached) and clock.monotonic() == started + 60


def test_a_deadline_already_past_still_lists_once():
    clock = FakeClock()
    kube = FakeKube(pods=[pod("a", phase="Failed")], clock=clock)
    informer = pods_informer(kube, clock)
    assert informer.wait_until(phase_of("a", "Failed"), clock.monotonic() - 1) == Satisfied(True)


def test_the_store_keeps_only_what_keep_returns_keyed_by_namespace_across_namespaces():
    clock = FakeClock()
    kube = FakeKube(pods=[pod("a", namespace="x"), pod("b", phase="Succeeded", namespace="y")], clock=clock)
    informer = Informer(kube, "Pod", None, clock=clock,
                        keep=lambda p: p["status"]["phase"] if p["status"]["phase"] == "Running" else None)
    changes = []

    def record(batch):
        changes.extend(batch)
        if len(changes) == 1:  # listed: then a ends
            kube.put(pod("a", "3", "Succeeded", namespace="x"))

    informer.add_handler(record)
    informer.wait_until(lambda pods: None if pods else True, clock.monotonic() + 60)
    assert changes == [Change("ADDED", "x/a", None, "Running"), Change("DELETED", "x/a", "Running", None)]


def once_waiting(clock, then) -> None:
    """``then()`` once a thread waits on the clock (the test's own, in ``wait_until``)."""
    clock.wait_for_waiters(1)
    then()


def test_on_its_own_thread_a_wait_reads_the_live_store():
    clock = WatchedClock()
    kube = FakeKube(pods=[pod("a")], clock=clock)
    release = threading.Event()

    def story(fake, timeout_s):
        release.wait(5)  # a real, short wait: the thread holds back its event until the waiter waits
        yield fake.apply("a", {"phase": "Failed"})
        fake.clock.sleep(timeout_s)

    kube.on_pod_watch = story
    with pods_informer(kube, clock) as informer:
        threading.Thread(target=once_waiting, args=(clock, release.set), daemon=True).start()
        assert informer.wait_until(phase_of("a", "Failed"), clock.monotonic() + 60) == Satisfied(True)
    assert kube.pod_lists == 1


def test_on_its_own_thread_the_deadline_is_a_step_of_the_clock():
    clock = WatchedClock()
    kube = FakeKube(pods=[pod("a")], clock=clock)
    kube.on_pod_watch = lambda fake, timeout_s: iter(())  # the watch ends at once, and resumes
    with pods_informer(kube, clock) as informer:
        threading.Thread(target=once_waiting, args=(clock, lambda: clock.advance(30)), daemon=True).start()
        outcome = informer.wait_until(lambda pods: None, clock.monotonic() + 30)
    assert isinstance(outcome, DeadlineReached) and list(outcome.last_view) == ["a"]
