#!/usr/bin/env bash
# Run every benchmark, or the ones named (e.g. `bench/run_all.sh planning_time`).
# The pure ones take a few minutes. The cluster ones need root; each runs against a
# local cluster of its own (bench/isolated.sh), and inventory_scale is long and heavy.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
PURE=(placement_quality planning_time)
CLUSTER=(control_plane end_to_end inventory_scale waiting_managers queueing first_step)
for name in "${@:-${PURE[@]} ${CLUSTER[@]}}"; do
    echo "== bench/$name.py"
    if [[ " ${CLUSTER[*]} " == *" $name "* ]]; then
        bench/isolated.sh "$DT_VENV/bin/python" -m "bench.$name"
    else
        "$DT_VENV/bin/python" -m "bench.$name"
    fi
done
