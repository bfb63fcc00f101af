#!/usr/bin/env bash
# Run a command (a test session) with a local cluster of its own, which the host's shared
# cluster and other such runs cannot see or disturb, nor it them: private network, mount and
# cgroup namespaces, its own run directory, CNI result cache and container log links.
#
# bench/isolated.sh does the network and mount part, for benchmarks run while nobody tests.
# Two clusters that run at once also need their nodes' cgroups apart: every node's is
# `dt-n<index>` at the top of each hierarchy, and a cluster that starts sweeps every such
# cgroup it sees, with the processes in it (leftovers.py). Here the cluster lives in a cgroup
# namespace rooted at a parent cgroup of its own (distributetrain-isolated-<pid>), with each
# hierarchy mounted again inside it, so it sees, creates and sweeps only its own nodes'
# cgroups, as a container's kubelet does with `--cgroupns=private`.
# What it shares with the host stays read-only to it (set DT_CACHE to a cache of its own for
# images, registry and node image stores: scripts/test-versions.sh does).
# Usage: scripts/isolated-cluster.sh COMMAND...   (DT_ISOLATED_LOGS=DIR keeps the cluster's logs)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
export PATH="$DT_VENV/bin:$PATH"

# The cgroup hierarchies: "mount point|fstype|options" (options without rw/ro; a named v1
# hierarchy alone gets "none," first).
hierarchies() {
  awk '{ for (i = 1; $i != "-"; i++) ; type = $(i + 1);
         if (type != "cgroup" && type != "cgroup2") next;
         n = split($(i + 3), opts, ","); kept = ""; controller = 0;
         for (j = 1; j <= n; j++) { if (opts[j] == "rw" || opts[j] == "ro") continue;
           kept = kept (kept == "" ? "" : ",") opts[j]; if (opts[j] !~ /^name=/) controller = 1 }
         if (type == "cgroup" && !controller) kept = "none," kept;
         print $5 "|" type "|" kept }' /proc/self/mountinfo
}

case "${DT_ISOLATED_STAGE:-host}" in
host)
  parent="distributetrain-isolated-$$"
  while IFS='|' read -r point _ _; do
    mkdir "$point/$parent"
    for setting in cpuset.cpus cpuset.mems; do  # an empty cpuset can run nothing
      if [ -f "$point/$setting" ]; then cat "$point/$setting" > "$point/$parent/$setting"; fi
    done
  done < <(hierarchies)
  run_dir=$(mktemp -d /tmp/distributetrain-isolated-XXXXXX)
  status=0
  DT_ISOLATED_STAGE=join DT_ISOLATED_CGROUP="$parent" DT_RUN="$run_dir" bash "$0" "$@" || status=$?
  # Whatever is left in the parent (nothing after a clean `down`) goes, then the cgroups.
  while IFS='|' read -r point _ _; do
    while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done \
      < <(find "$point/$parent" -name cgroup.procs -exec cat {} + 2>/dev/null)
  done < <(hierarchies)
  sleep 1
  while IFS='|' read -r point _ _; do
    find "$point/$parent" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done < <(hierarchies)
  if ! grep -qF " $run_dir" /proc/self/mountinfo; then rm -rf "$run_dir"; fi  # never through a mount
  exit "$status"
  ;;
join)
  while IFS='|' read -r point _ _; do
    echo $$ > "$point/$DT_ISOLATED_CGROUP/cgroup.procs"
  done < <(hierarchies)
  exec unshare --net --mount --cgroup --propagation private env DT_ISOLATED_STAGE=inside bash "$0" "$@"
  ;;
inside)
  mapfile -t mounted < <(hierarchies)
  mount -t tmpfs -o mode=755 isolated-netns /run/netns 2>/dev/null \
    || { mkdir -p /run/netns && mount -t tmpfs -o mode=755 isolated-netns /run/netns; }
  # /sys/class/net must list this namespace's links: a fresh sysfs, and on it the cgroup
  # hierarchies mounted again from inside the cgroup namespace (rooted at its parent).
  mount -t sysfs isolated-sysfs /sys
  mount -t tmpfs -o mode=755 isolated-cgroup /sys/fs/cgroup
  for entry in "${mounted[@]}"; do
    IFS='|' read -r point type options <<<"$entry"
    mkdir -p "$point"
    if [ "$type" = cgroup2 ]; then
      mount -t cgroup2 cgroup2 "$point"
    else
      mount -t cgroup -o "$options" cgroup "$point"
    fi
  done
  # The nodes' CNI results and container log links, which `down` sweeps by name.
  for directory in /var/lib/cni /var/log/containers; do
    mkdir -p "$directory"
    mount -t tmpfs -o mode=755 isolated-host-files "$directory"
  done
  ip link set lo up
  status=0
  "$@" || status=$?
  "$DT_VENV/bin/python" -m localcluster down >/dev/null 2>&1 || true
  # The components' and nodes' logs, kept where DT_ISOLATED_LOGS says (the run directory goes).
  if [ -n "${DT_ISOLATED_LOGS:-}" ] && [ -d "$DT_RUN/logs" ]; then
    mkdir -p "$DT_ISOLATED_LOGS"
    cp -a "$DT_RUN/logs/." "$DT_ISOLATED_LOGS/"
  fi
  exit "$status"
  ;;
esac
