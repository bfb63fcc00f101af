#!/usr/bin/env bash
# `make test-versions`: a smoke tier on each Kubernetes release the local cluster builds
# (localcluster/controlplane/v*/), each in a cluster of its own, then a table of the results.
#
# Each release's cluster runs in private network, mount and cgroup namespaces with its own run
# directory (scripts/isolated-cluster.sh), from a cache of its own for what changes under a
# cluster (the project's images, built from this checkout into a copy of the project's podman
# store; the registry; the nodes' image stores) beside the builds it shares: so the host's shared
# cluster, and the tests and image builds others run meanwhile, are left alone, nor change
# anything under it. The smoke tier is existing tests, selected, not copied: the cluster runs the release
# asked for (tests/versions), DRA GPUs (tests/cluster/test_dra.py), the demo's job trains, a
# job in a PodSecurity `restricted` namespace under exactly rbac/, a restart after a lost
# worker, a queued job through Kueue, a scale-up through Karpenter where its version allows,
# two jobs racing for the same GPUs as gangs where the release serves PodGroups.
# Everything is built first, outside the clusters: a release's control plane 10-25 minutes
# the first time; none of it is built by `make setup` or `make test`.
#
# Usage: scripts/test-versions.sh [MAJOR.MINOR...]   (default: every release)
# DT_VERSIONS_CACHE: that cache (default $DT_CACHE/test-versions/cache); DT_CLUSTER_LOCK=FILE:
# hold this flock while the project's podman store is first copied (no image build may run
# meanwhile). Results, the JUnit XML and logs: $DT_CACHE/test-versions/<date>/.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/env.sh"
cd "$here" || exit 1

# Karpenter v1.8 supports Kubernetes 1.29 to 1.34 (karpenter.sh's compatibility matrix);
# Kueue v0.19.2 requires 1.29 or newer (its README): it runs on every release here.
KARPENTER_RELEASES=(1.34)
# Gang scheduling: the PodGroup (scheduling.k8s.io/v1beta1) is served from 1.37
# (localcluster's components.gang_scheduling).
GANG_RELEASES=(1.37)
SMOKE=(
  tests/versions/test_cluster_release.py
  tests/cluster/test_dra.py
  tests/e2e/test_training_job.py::test_three_gpus_over_2_1_train_and_clean_up
  tests/e2e/test_restricted_namespace.py::test_the_namespace_refuses_a_root_pod
  tests/e2e/test_restricted_namespace.py::test_the_demo_job_trains_and_leaves_nothing
  tests/faults/test_restarts.py::test_a_worker_deleted_mid_training_restarts_the_job_which_finishes
  tests/faults/test_queued_jobs.py::test_a_job_split_over_a_flavor_s_two_nodes_is_one_workload_that_starts_only_when_all_of_it_fits
)
KARPENTER_SMOKE=tests/integration/test_scale_up.py::test_a_job_on_no_gpu_node_makes_karpenter_add_two_and_they_go_after
GANG_SMOKE=tests/versions/test_gang_scheduling.py::test_two_jobs_racing_for_the_same_gpus_never_both_half_start
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
versions_cache="${DT_VERSIONS_CACHE:-$DT_CACHE/test-versions/cache}"
containers_run=/run/distributetrain-test-versions-containers
# podman's run root of this script's image builds and clusters (locks, an events log):
# state of this run only, left behind by podman.
trap 'rm -rf "$containers_run"' EXIT
mkdir -p "$results" "$versions_cache/logs"
for part in gomod gocache k8s kueue karpenter kube-router containerd dra registry/bin; do
  mkdir -p "$DT_CACHE/$part" "$(dirname "$versions_cache/$part")"
  ln -sfn "$DT_CACHE/$part" "$versions_cache/$part"
done
if [ ! -d "$versions_cache/containers/storage" ]; then
  echo "test-versions: copying the project's podman store into $versions_cache (once)"
  if [ -n "${DT_CLUSTER_LOCK:-}" ]; then
    flock "$DT_CLUSTER_LOCK" cp -a "$DT_CONTAINERS" "$versions_cache/containers"
  else
    cp -a "$DT_CONTAINERS" "$versions_cache/containers"
  fi
fi
DT_CACHE="$versions_cache" DT_CONTAINERS_RUN="$containers_run" bash scripts/images/build.sh >"$results/images.log" 2>&1 || {
  echo "test-versions: building the images failed; see $results/images.log" >&2
  exit 2
}

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
  if [[ " ${GANG_RELEASES[*]} " == *" $release "* ]]; then
    selection+=("$GANG_SMOKE")
  else
    skips+=("skip gang scheduling=PodGroups are served from Kubernetes 1.37")
  fi
  DT_KUBERNETES_VERSION="$release" DT_CACHE="$versions_cache" DT_CONTAINERS_RUN="$containers_run" \
    DT_ISOLATED_LOGS="$results/$release-logs" \
    timeout "$RUN_TIMEOUT_S" bash scripts/isolated-cluster.sh \
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
  run_release "$release" || failed=1
  pinned="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' "localcluster/controlplane/v$release/go.mod")"
  { echo "release=$pinned"; echo "seconds=$(($(date +%s) - started))"; } >>"$results/$release.run"
  echo "test-versions: Kubernetes $pinned: $(tail -n 1 "$results/$release.log") ($results/$release.log)"
done
"$DT_VENV/bin/python" scripts/versions_table.py "$results" | tee "$results/table.md"
exit "$failed"
