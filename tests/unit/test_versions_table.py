"""`make test-versions`' table (scripts/versions_table.py): one row per release, each smoke
column's outcome from the release's JUnit XML, columns skipped on a release with their why."""

from pathlib import Path

from harness import scripts

versions_table = scripts.load("versions_table.py")

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.versions.test_cluster_release" name="test_the_api_server_and_a_kubelet_run_the_release_asked_for" time="20"/>
<testcase classname="tests.cluster.test_dra" name="test_a_dra_node_publishes_its_gpus" time="50"/>
<testcase classname="tests.e2e.test_training_job" name="test_three_gpus_over_2_1_train_and_clean_up" time="90"/>
<testcase classname="tests.e2e.test_restricted_namespace" name="test_the_namespace_refuses_a_root_pod" time="1"/>
<testcase classname="tests.e2e.test_restricted_namespace" name="test_the_demo_job_trains_and_leaves_nothing" time="99">
<failure message="AssertionError">boom</failure></testcase>
<testcase classname="tests.faults.test_restarts" name="test_a_worker_deleted_mid_training_restarts" time="120"/>
<testcase classname="tests.versions.test_gang_scheduling" name="test_two_jobs_racing_for_the_same_gpus" time="150"/>
</testsuite></testsuites>"""


def test_a_release_s_row_has_each_column_s_outcome_a_failure_winning_and_what_did_not_run():
    facts = versions_table.run_facts("skip Karpenter=Karpenter v1.8 supports Kubernetes 1.29-1.34\nexit=1\n"
                                     "release=v1.36.3\nseconds=600\n")
    assert versions_table.row("1.36", JUNIT, facts) == [
        "v1.36.3", "pass", "pass", "pass", "FAIL", "pass", "not run",
        "skipped: Karpenter v1.8 supports Kubernetes 1.29-1.34", "pass", "exit 1", "10 min"]


def test_the_gang_scheduling_test_is_a_column_of_its_own_not_the_cluster_s():
    """Both are in tests/versions; a gang's failure is not the cluster's."""
    failed = JUNIT.replace('name="test_two_jobs_racing_for_the_same_gpus" time="150"/>',
                           'name="test_two_jobs_racing_for_the_same_gpus" time="150"><failure/></testcase>')
    row = dict(zip(["release", *(c for c, _ in versions_table.COLUMNS)], versions_table.row("1.37", failed, {})))
    assert (row["cluster"], row["gang scheduling"]) == ("pass", "FAIL")


def test_the_table_is_markdown_with_a_header_and_a_row_per_release():
    rows = [["v1.34.10", *["pass"] * len(versions_table.COLUMNS), "green", "14 min"]]
    lines = versions_table.table(rows).splitlines()
    assert lines[0] == "| Kubernetes | cluster | DRA GPUs | demo job | restricted + rbac/ | restart | Kueue | " \
                       "Karpenter | gang scheduling | run | time |"
    assert lines[1] == "| " + " | ".join(["---"] * 11) + " |"
    assert lines[2] == "| v1.34.10 | pass | pass | pass | pass | pass | pass | pass | pass | green | 14 min |"


def test_a_release_whose_run_left_no_results_shows_nothing_run():
    assert versions_table.row("1.35", None, {"exit": "124", "seconds": "1500"})[1:] == [
        *["not run"] * len(versions_table.COLUMNS), "exit 124", "25 min"]


def test_every_smoke_test_the_script_names_exists():
    """A renamed test would leave the tier with "not found" on every release (it did once)."""
    repo = Path(__file__).resolve().parents[2]
    script = (repo / "scripts" / "test-versions.sh").read_text()
    named = [word for word in script.split() if word.startswith("tests/") and "::" in word]
    assert named, "no test ids found in scripts/test-versions.sh"
    for test_id in named:
        path, name = test_id.split("::")
        assert f"def {name}(" in (repo / path).read_text(), f"{test_id} (scripts/test-versions.sh) does not exist"
