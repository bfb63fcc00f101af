"""The start's deadlines: --worker-ready-timeout counts only time no slow start explains."""

from distributetrain.core.clock import FakeClock
from distributetrain.core.settings import JobSettings
from distributetrain.core.watching.startbudget import StartBudget
from distributetrain.core.watching.startprogress import AwaitingNode, Pulling

SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="reg/base:1")  # 5m, 30m, 15m
PULL = Pulling("reg/base:1", "node-a")


def test_a_pull_of_six_minutes_under_a_five_minute_timeout_starts_fine():
    clock = FakeClock()
    budget = StartBudget.starting(SETTINGS, clock.monotonic())
    clock.advance(5)  # created, scheduled, then pulling
    slow = {"w0": (PULL, clock.monotonic())}
    budget.observe(clock.monotonic(), ["w0"], slow)
    clock.advance(360)
    assert not budget.timed_out(clock.monotonic())
    assert budget.overdue(clock.monotonic(), slow) == {}
    assert budget.timeout_at(clock.monotonic()) == float("inf")
    budget.observe(clock.monotonic(), ["w0"], {})  # pulled, starting: the timeout runs on from 5 s
    assert budget.spent_s(clock.monotonic()) == 5
    assert budget.timeout_at(clock.monotonic()) == clock.monotonic() + 295


def test_a_pod_neither_pulling_nor_ready_past_the_timeout_is_released():
    clock = FakeClock()
    budget = StartBudget.starting(SETTINGS, clock.monotonic())
    budget.observe(clock.monotonic(), ["w0", "chief"], {"w0": (PULL, clock.monotonic())})  # the chief is stuck
    clock.advance(299)
    assert not budget.timed_out(clock.monotonic())
    clock.advance(1)
    assert budget.timed_out(clock.monotonic())


def test_time_stuck_before_and_after_a_pull_adds_up():
    clock = FakeClock()
    budget = StartBudget.starting(SETTINGS, clock.monotonic())
    clock.advance(200)  # not scheduled
    budget.observe(clock.monotonic(), ["w0"], {"w0": (PULL, clock.monotonic())})
    clock.advance(600)
    budget.observe(clock.monotonic(), ["w0"], {})  # running, not Ready
    clock.advance(99)
    assert not budget.timed_out(clock.monotonic())
    clock.advance(1)
    assert budget.timed_out(clock.monotonic())


def test_ready_pods_do_not_count():
    clock = FakeClock()
    budget = StartBudget.starting(SETTINGS, clock.monotonic())
    budget.observe(clock.monotonic(), [], {})
    clock.advance(1000)
    assert not budget.timed_out(clock.monotonic())


def test_an_image_pull_timeout_runs_out_with_its_reason():
    clock = FakeClock()
    budget = StartBudget.starting(SETTINGS.replace(image_pull_timeout_s=1800.0), clock.monotonic())
    slow = {"w0": (PULL, clock.monotonic())}
    budget.observe(clock.monotonic(), ["w0"], slow)
    assert budget.stage_ends_at(slow) == clock.monotonic() + 1800
    clock.advance(1799)
    assert budget.overdue(clock.monotonic(), slow) == {}
    clock.advance(1)
    assert budget.overdue(clock.monotonic(), slow) == {"w0": 'pulling image "reg/base:1" on node-a for 30m0s'}
    assert not budget.timed_out(clock.monotonic())


def test_a_wait_for_a_new_node_has_the_scale_up_timeout():
    clock = FakeClock()
    budget = StartBudget.starting(SETTINGS.replace(scale_up_timeout_s=60.0), clock.monotonic())
    slow = {"w0": (AwaitingNode(), clock.monotonic())}
    clock.advance(60)
    assert budget.overdue(clock.monotonic(), slow) == {"w0": "awaiting a new node for 1m0s"}


def test_a_budget_is_spent_at_the_moment_it_said_it_would_be_whatever_the_rounding():
    # 1000.3 - 1000.0 is a hair short of 0.3 in floats, and 1000.3 plus that hair is 1000.3.
    budget = StartBudget.starting(SETTINGS.replace(worker_ready_timeout_s=0.3), 1000.0)
    now = 1000.3
    assert budget.timeout_at(now) <= now
    assert budget.timed_out(now)
