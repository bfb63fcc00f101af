#!/usr/bin/env bash
# Everything `make demo` and `make test` need on a fresh machine, each step cached:
# Debian packages, the project venv (manager package and test tools), the images the
# local cluster runs (built with podman from the project's Dockerfiles on local
# stand-ins for their upstream bases) and the upstream Kubernetes control plane (built
# with Go). The two slow builds run side by side; a warm run takes seconds and prints
# one line per step.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/env.sh"
mkdir -p "$DT_CACHE/logs"

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: the local cluster needs root (bridge, network namespaces, mounts, containers)" >&2
  exit 1
fi

bash "$here/localcluster/controlplane/install-system-deps.sh"

control_plane_log="$DT_CACHE/logs/control-plane-build.log"
bash "$here/localcluster/controlplane/build.sh" > "$control_plane_log.out" 2> "$control_plane_log" &
control_plane_pid=$!

bash "$here/scripts/bootstrap-python.sh"
bash "$here/localcluster/images/build.sh"

if ! wait "$control_plane_pid"; then
  echo "setup: building the control plane failed; the end of $control_plane_log:" >&2
  tail -n 30 "$control_plane_log" >&2
  exit 1
fi
echo "setup: control plane in $(cat "$control_plane_log.out")"
