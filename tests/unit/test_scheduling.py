"""The order of `make test`'s two-at-a-time step (tests/scheduling.py): longest groups first."""

from scheduling import UNMEASURED_S, expected_s, longest_first

DURATIONS = {"tests/e2e/test_elastic_job.py::test_a": 400.0, "tests/e2e/test_elastic_job.py::test_b": 300.0,
             "tests/faults/test_rbac.py::test_x[0]": 20.0}


def test_a_group_of_three_long_tests_goes_before_many_short_ones():
    queue = {
        "test_rbac": {f"tests/faults/test_rbac.py::test_x[{i}]@test_rbac": False for i in range(40)},
        "test_elastic_job": {"tests/e2e/test_elastic_job.py::test_a@test_elastic_job": False,
                             "tests/e2e/test_elastic_job.py::test_b@test_elastic_job": False},
        "tests/faults/test_new.py::test_new": {"tests/faults/test_new.py::test_new": False},
    }
    assert list(longest_first(queue, DURATIONS)) == ["test_elastic_job", "test_rbac",
                                                     "tests/faults/test_new.py::test_new"]


def test_a_test_the_table_does_not_know_counts_as_a_short_one():
    assert expected_s(["tests/faults/test_new.py::test_new@g", "tests/faults/test_rbac.py::test_x[0]@g"],
                      DURATIONS) == UNMEASURED_S + 20.0
