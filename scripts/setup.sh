#!/usr/bin/env bash
# Everything `make demo` and `make test` need on a fresh machine, each step cached:
# Debian packages, the project venv, the CPU training stack (TensorFlow + Horovod
# built from source) and the upstream Kubernetes control plane (built with Go).
# The two slow builds run side by side; a second run takes seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/env.sh"
mkdir -p "$DT_CACHE/logs"

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: the local cluster needs root (bridge, network namespaces, mounts)" >&2
  exit 1
fi

# apt: both scripts skip packages already installed; one `apt-get update` is enough.
bash "$here/localcluster/controlplane/install-system-deps.sh"
bash "$here/base_image/install-system.sh"

control_plane_log="$DT_CACHE/logs/control-plane-build.log"
bash "$here/localcluster/controlplane/build.sh" > "$control_plane_log.out" 2> "$control_plane_log" &
control_plane_pid=$!

bash "$here/scripts/bootstrap-python.sh"
bash "$here/base_image/install-python.sh" "$DT_VENV/bin/python"

if ! wait "$control_plane_pid"; then
  echo "setup: building the control plane failed; the end of $control_plane_log:" >&2
  tail -n 30 "$control_plane_log" >&2
  exit 1
fi
echo "setup: done (control plane in $(cat "$control_plane_log.out"))"
