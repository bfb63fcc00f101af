#!/usr/bin/env bash
# Run every benchmark, or the ones named (e.g. `bench/run_all.sh placement_quality`).
# Both are pure (no cluster) and take a few minutes together.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ALL=(placement_quality planning_time)
for name in "${@:-${ALL[@]}}"; do
    echo "== bench/$name.py"
    "$DT_VENV/bin/python" -m "bench.$name"
done
