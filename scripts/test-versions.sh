#!/usr/bin/env bash
# `make test-versions`: a smoke tier on each Kubernetes release the local cluster builds
# (localcluster/controlplane/v*/), each in a cluster of its own, then a table of the results.
#
# Each release's cluster runs in private network and mount namespaces with its own run
# directory (bench/isolated.sh), so the shared cluster of the host (fixed addresses) is left
# alone. The smoke tier is existing tests, selected, not copied: the cluster runs the release
# asked for (tests/versions), DRA GPUs (tests/cluster/test_dra.py), the demo's job trains, a
# job in a PodSecurity `restricted` namespace under exactly rbac/, a restart after a lost
# worker, a queued job through Kueue, a scale-up through Karpenter where its version allows.
# Everything is built first, outside the clusters: a release's control plane 10-25 minutes
# the first time; none of it is built by `make setup` or `make test`.
#
# Usage: scripts/test-versions.sh [MAJOR.MINOR...]   (default: every release)
# DT_CLUSTER_LOCK=FILE: hold this flock while each release's cluster runs (its nodes start
# from the machine's image cache and registry, which a concurrent image build or a cluster of
# the host would change under them). Results, the JUnit XML and logs: $DT_CACHE/test-versions/.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/env.sh"
cd "$here" || exit 1

# Karpenter v1.8 supports Kubernetes 1.29 to 1.34 (karpenter.sh's compatibility matrix);
# Kueue v0.19.2 requires 1.29 or newer (its README): it runs on every release here.
KARPENTER_RELEASES=(1.34)
SMOKE=(
  tests/versions
  tests/cluster/test_dra.py
  tests/e2e/test_training_job.py::test_three_gpus_over_2_1_train_and_clean_up
  tests/e2e/test_restricted_namespace.py::test_the_namespace_refuses_a_root_pod
  tests/e2e/test_restricted_namespace.py::test_the_demo_job_trains_and_leaves_nothing
  tests/faults/test_restarts.py::test_a_worker_deleted_mid_training_restarts_the_job_which_finishes
  tests/faults/test_queued_jobs.py::test_a_job_split_over_two_nodes_is_one_workload_that_starts_only_when_all_of_it_fits
)
KARPENTER_SMOKE=tests/integration/test_scale_up.py::test_a_job_on_no_gpu_node_makes_karpenter_add_two_and_they_go_after
RUN_TIMEOUT_S=1500

if [ "$(id -u)" -ne 0 ]; then
  echo "test-versions: the local cluster needs root (bridge, network namespaces, mounts)" >&2
  exit 1
fi
releases=("$@")
if ((${#releases[@]} == 0)); then
  for module in localcluster/controlplane/v1.*/; do
    module="${module%/}"
    releases+=("${module##*/v}")
  done
fi
results="$DT_CACHE/test-versions/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$results"

echo "test-versions: building Kubernetes ${releases[*]}, Kueue, Karpenter, the DRA plugin and containerd 1.7 (logs: $results/build.log)"
for release in "${releases[@]}"; do
  bash localcluster/controlplane/build.sh "$release" >>"$results/build.log" 2>&1 || {
    echo "test-versions: building Kubernetes $release failed; see $results/build.log" >&2
    exit 2
  }
done
for part in kueuecontroller karpentercontroller drakubeletplugin containerdruntime registryserver; do
  bash "localcluster/$part/build.sh" >>"$results/build.log" 2>&1 || {
    echo "test-versions: building $part failed; see $results/build.log" >&2
    exit 2
  }
done

run_release() {
  local release="$1" selection=("${SMOKE[@]}") skips=()
  if [[ " ${KARPENTER_RELEASES[*]} " == *" $release "* ]]; then
    selection+=("$KARPENTER_SMOKE")
  else
    skips+=("skip Karpenter=Karpenter v1.8 supports Kubernetes 1.29-1.34")
  fi
  # A node of another cluster on this host shares its node slot's image store: wait for none.
  if ip netns list 2>/dev/null | grep -q '^dt-n'; then
    echo "test-versions: nodes of another local cluster run on this host (ip netns: dt-n*); stop them first" >&2
    return 3
  fi
  DT_KUBERNETES_VERSION="$release" timeout "$RUN_TIMEOUT_S" bash bench/isolated.sh \
    "$DT_VENV/bin/python" -m pytest -q -p no:cacheprovider --junitxml="$results/$release.xml" "${selection[@]}" \
    >"$results/$release.log" 2>&1
  local status=$?
  printf '%s\n' "${skips[@]}" >"$results/$release.run"
  echo "exit=$status" >>"$results/$release.run"
  return "$status"
}

failed=0
for release in "${releases[@]}"; do
  started=$(date +%s)
  if [ -n "${DT_CLUSTER_LOCK:-}" ]; then
    exec {lock}>"$DT_CLUSTER_LOCK"
    flock "$lock"
  fi
  run_release "$release" || failed=1
  if [ -n "${DT_CLUSTER_LOCK:-}" ]; then
    exec {lock}>&-
  fi
  pinned="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' "localcluster/controlplane/v$release/go.mod")"
  { echo "release=$pinned"; echo "seconds=$(($(date +%s) - started))"; } >>"$results/$release.run"
  echo "test-versions: Kubernetes $pinned: $(tail -n 1 "$results/$release.log") ($results/$release.log)"
done
"$DT_VENV/bin/python" scripts/versions_table.py "$results" | tee "$results/table.md"
exit "$failed"
