#!/usr/bin/env bash
# Every test tier, as `make test` runs them. Tests on the local cluster mostly wait on
# pods (starts, grace periods, node-loss verdicts), so they run four at a time, each on
# nodes and in a namespace of its own, the groups expected to take longest first
# (tests/scheduling.py, tests/durations.json). Alone, after them: the tests marked
# `exclusive` (they stop, restart or take down what every test shares: the API server, the
# cluster itself, the nodes' bridge). The cluster stays up between the steps and goes down
# after the last one. Every step runs; the exit code is 1 if any failed.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/env.sh"
cd "$here" || exit 1
# The tests' temporary paths: a directory of this run's own, gone at its end, passed or
# failed. pytest's default root (/tmp/pytest-of-USER) keeps the last three sessions, and
# a retention of none there would delete a concurrent session's directories as it exits.
basetemp="$(mktemp -d /tmp/distributetrain-tests-XXXXXX)"
# Each step's JUnit report, with what a failed test printed and logged. After a failure they
# are kept here (a CI page shows only part of the output; the cluster's logs stay too), and
# the last lines printed name each failed test and its first line (scripts/test-failures.py).
reports="/tmp/distributetrain-test-reports"
pytest=("$DT_VENV/bin/python" -m pytest -ra -o junit_logging=all -o junit_log_passing_tests=false)
cluster_tiers=(tests/cluster tests/integration tests/e2e tests/platforms tests/faults)
# Every test of 3 s or more, for scripts/test-durations.py to refresh the order from.
timed=(--durations=0 --durations-min=3)
failed=0
# Every step keeps the cluster up (DT_KEEP_CLUSTER=1); if tests started it, it goes down
# after the last one: also when a step stopped before starting a session (an error
# collecting its tests), or when interrupted between steps. After a green run its run
# directory goes too (nothing is left in /tmp); after a failure it stays, with the
# components' logs. A cluster brought up by hand stays up.
take_down() {
  if [ "${DT_KEEP_CLUSTER:-}" != 1 ] && [ -e "$DT_RUN/test-sessions/started-by-tests" ]; then
    local purge=()
    if [ "$failed" = 0 ]; then purge=(--purge); fi
    "$DT_VENV/bin/python" -m localcluster down "${purge[@]}"
  fi
}
trap 'failed=1; take_down; rm -rf "$basetemp"; exit 130' INT TERM
# DT_CLUSTER_WORKERS: how many cluster tests at a time. On 2 cores four: the tests mostly
# wait on pods, and three left the cores idle 30 % of the time (host cgroups sampled every
# minute; HOROVOD_CYCLE_TIME=20 and nodes schedulable at once had cut the CPU they need).
# The unit tests need no cluster and each takes its own ports and temporary paths. Some
# wait on real sockets (the API layer's timeouts): three at a time keep both cores busy
# meanwhile (62 s two at a time, 53 three).
"${pytest[@]}" --basetemp="$basetemp/unit" --junitxml="$basetemp/unit.xml" --durations=15 -n 3 tests/unit || failed=1
DT_KEEP_CLUSTER=1 "${pytest[@]}" --basetemp="$basetemp/cluster" --junitxml="$basetemp/cluster.xml" "${timed[@]}" -n "${DT_CLUSTER_WORKERS:-4}" \
  --dist loadgroup -m "not exclusive" "${cluster_tiers[@]}" || failed=1
DT_KEEP_CLUSTER=1 "${pytest[@]}" --basetemp="$basetemp/exclusive" --junitxml="$basetemp/exclusive.xml" "${timed[@]}" -m exclusive "${cluster_tiers[@]}" || failed=1
take_down
rm -rf "$reports"
if [ "$failed" != 0 ]; then
  mkdir -p "$reports" && cp "$basetemp"/*.xml "$reports"/ 2>/dev/null
  echo "the steps' reports (what each failed test printed and logged): $reports"
  "$DT_VENV/bin/python" scripts/test-failures.py "$basetemp"/{unit,cluster,exclusive}.xml
fi
rm -rf "$basetemp"
exit "$failed"
