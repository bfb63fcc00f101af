"""bench/startparts.py: a job's start cut into parts that add up to its submission-to-first-step."""

import re

import pytest

from bench import startparts
from bench.startparts import (KARPENTER, MANAGER_HOSTS, MANAGER_PLAN, NODES, POD_START, PULL, TRAINING, Marks,
                              covered, first_line_time, manager_share, split)


def marks(**changes) -> Marks:
    """A warm start: no node added, no pull; the chief has its hosts 0.25 s after the pods started."""
    fields = dict(submitted=100.0, pods_created=100.5, first_nodeclaim=None, nodes_ready=None, pulls=(),
                  pods_started=104.0, hosts_published=104.25, first_step=120.0)
    return Marks(**{**fields, **changes})


def test_a_warm_start_is_the_managers_two_parts_the_pods_and_the_training():
    assert split(marks()) == {MANAGER_PLAN: 0.5, KARPENTER: 0.0, NODES: 0.0, POD_START: 3.5, PULL: 0.0,
                              MANAGER_HOSTS: 0.25, TRAINING: 15.75}


def test_a_start_from_zero_has_karpenters_decision_and_the_nodes_boot():
    parts = split(marks(first_nodeclaim=102.5, nodes_ready=140.0, pods_started=146.0, hosts_published=146.25,
                        first_step=162.0))
    assert parts == {MANAGER_PLAN: 0.5, KARPENTER: 2.0, NODES: 37.5, POD_START: 6.0, PULL: 0.0,
                     MANAGER_HOSTS: 0.25, TRAINING: 15.75}
    assert sum(parts.values()) == 62.0


def test_overlapping_pulls_on_two_nodes_count_once_and_the_rest_of_the_start_is_the_pods():
    parts = split(marks(pulls=((101.0, 146.0), (101.5, 147.0)), pods_started=150.0, hosts_published=150.25,
                        first_step=166.0))
    assert parts[PULL] == 46.0 and parts[POD_START] == 3.5 and sum(parts.values()) == 66.0


def test_hosts_published_before_the_chief_ran_leave_the_manager_no_part_and_the_total_whole():
    parts = split(marks(hosts_published=103.0))
    assert parts[MANAGER_HOSTS] == 0.0 and parts[POD_START] == 3.5 and sum(parts.values()) == 20.0


def test_an_instant_seen_late_by_a_poll_never_makes_a_part_negative():
    parts = split(marks(first_nodeclaim=100.2, nodes_ready=100.3))  # both seen before the last create returned
    assert parts[KARPENTER] == 0.0 and parts[NODES] == 0.0 and min(parts.values()) >= 0.0


def test_the_managers_share_is_its_two_parts():
    assert manager_share(split(marks())) == 0.75


@pytest.mark.parametrize("intervals, expected", [
    ((), 0.0),
    (((0.0, 10.0),), 8.0),  # clipped to [1, 9]
    (((2.0, 4.0), (3.0, 6.0), (7.0, 8.0)), 5.0),
    (((2.0, 8.0), (3.0, 4.0)), 6.0),  # one inside the other
    (((10.0, 12.0),), 0.0),  # wholly after
])
def test_covered_counts_each_moment_once_within_the_window(intervals, expected):
    assert covered(intervals, 1.0, 9.0) == expected


def test_the_first_matching_line_of_a_timestamped_log_gives_its_time_to_the_nanosecond_digits_python_keeps():
    log = ("2026-11-26T23:10:00.100000000Z distributetrain: horovodrun -np 2 on 10.0.0.1 slots=1\n"
           "not a log line epoch=1 loss=0.5\n"
           "2026-11-26T23:10:12.250000000Z [1,0]<stdout>:epoch=1 loss=2.1 accuracy=0.2 samples_per_sec=50.0 size=2\n"
           "2026-11-26T23:10:14Z [1,0]<stdout>:epoch=1 loss=1.0\n")
    assert first_line_time(log, re.compile(r"\bepoch=1 loss=")) == pytest.approx(1795734612.25)
    assert first_line_time(log, re.compile(r"^distributetrain: horovodrun")) == pytest.approx(1795734600.1)
    assert first_line_time(log, re.compile("never")) is None


def test_the_parts_are_in_the_order_they_happen_and_the_manager_has_two():
    assert startparts.PARTS == (MANAGER_PLAN, KARPENTER, NODES, POD_START, PULL, MANAGER_HOSTS, TRAINING)
    assert startparts.MANAGER_PARTS == (MANAGER_PLAN, MANAGER_HOSTS)
