#!/usr/bin/env bash
# Run a command (a cluster benchmark) with a local cluster of its own.
#
# The shared cluster's control plane uses fixed ports and a fixed bridge, and other
# engineers' test sessions take it down when they end; a benchmark run there is cut
# short, and its load slows their tests. In private network and mount namespaces,
# with its own run directory, the benchmark starts its own cluster (same binaries,
# same code), which no one else can see, stop or slow through the API server.
# Usage: bench/isolated.sh python -m bench.control_plane
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
export PATH="$DT_VENV/bin:$PATH"  # `python` is the project's venv
if [ "${DT_BENCH_ISOLATED:-}" != 1 ]; then
    run_dir=$(mktemp -d /tmp/distributetrain-bench-XXXXXX)
    exec unshare --net --mount --propagation private \
        env DT_BENCH_ISOLATED=1 DT_RUN="$run_dir" bash "$0" "$@"
fi
mkdir -p /run/netns
mount -t tmpfs -o mode=755 bench-netns /run/netns  # the nodes' netns names, private
# /sys/class/net must list this namespace's links, so /sys is a fresh sysfs; that hides
# /sys/fs/cgroup, which runc (cgroupfs manager) needs to start the pods' containers, so
# the host's cgroup tree is kept aside first and moved back on top. Nothing else podman
# uses lives under /sys; its run root (/run/distributetrain-containers) is untouched.
cgroup_keep=$(mktemp -d /tmp/distributetrain-bench-cgroup-XXXXXX)
mount --rbind /sys/fs/cgroup "$cgroup_keep"
mount --make-rprivate "$cgroup_keep"
mount -t sysfs bench-sysfs /sys
mount --move "$cgroup_keep" /sys/fs/cgroup
rmdir "$cgroup_keep"
ip link set lo up
take_down() {
    "$DT_VENV/bin/python" -m localcluster down --purge >/dev/null 2>&1 || true
    # Never delete through a mount (a pod's bind of base_image/ would lose its files).
    if ! grep -qF " $DT_RUN" /proc/self/mountinfo; then
        rm -rf "$DT_RUN"
    fi
}
trap take_down EXIT
# The benchmark runs in the background so that a SIGTERM or ^C reaches it at once (bash
# runs a trap only after its foreground command ends) and its cluster goes after it.
"$@" &
benchmark=$!
trap 'kill -TERM "$benchmark" 2>/dev/null' TERM INT
status=0
while kill -0 "$benchmark" 2>/dev/null; do
    wait "$benchmark" && status=0 || status=$?
done
exit "$status"
