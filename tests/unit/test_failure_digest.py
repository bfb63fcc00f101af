"""The last lines of a failed `make test` (scripts/test-failures.py): each failed or erroring
test of the steps' JUnit reports, with the first line of what it said; a step that wrote no
report (it never started) adds nothing."""

from harness import scripts

digest = scripts.load("test-failures.py")

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.faults.test_faults" name="test_ten_managers_at_once_room_for_three" time="300"/>
<testcase classname="tests.e2e.test_elastic_job" name="test_grows[dra]" time="400">
<failure message="AssertionError: pod flex did not reach the expected state in 240s&#10;its log (tail):">trace</failure>
</testcase>
<testcase classname="tests.cluster.test_nodes" name="test_x" time="1"><error message="">fixture failed</error></testcase>
</testsuite></testsuites>"""


def test_each_failed_test_is_one_line_with_the_first_line_it_said(tmp_path, capsys):
    (tmp_path / "cluster.xml").write_text(JUNIT)
    assert digest.main([str(tmp_path / "unit.xml"), str(tmp_path / "cluster.xml")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "FAILED tests.e2e.test_elastic_job::test_grows[dra]: AssertionError: pod flex did not reach the expected "
        "state in 240s",
        "FAILED tests.cluster.test_nodes::test_x: fixture failed",
    ]
