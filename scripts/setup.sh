#!/usr/bin/env bash
# Everything `make demo` and `make test` need on a fresh machine, each step cached:
# Debian packages, the project venv (manager package and test tools), the images the
# local cluster runs (built with podman from the project's Dockerfiles on local
# stand-ins for their upstream bases), the upstream Kubernetes control plane and node
# components, the image registry, Kueue and Karpenter (built with Go). The slow builds run side by side;
# a warm run takes seconds and prints one line per step.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/env.sh"
mkdir -p "$DT_CACHE/logs"

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: the local cluster needs root (bridge, network namespaces, mounts, containers)" >&2
  exit 1
fi

bash "$here/localcluster/controlplane/install-system-deps.sh"

# The Go builds share one build cache: the registry's, Kueue's and Karpenter's wait for the control plane's.
go_log="$DT_CACHE/logs/go-build.log"
( bash "$here/localcluster/controlplane/build.sh" && bash "$here/localcluster/registryserver/build.sh" \
  && bash "$here/localcluster/kueuecontroller/build.sh" \
  && bash "$here/localcluster/karpentercontroller/build.sh" ) > "$go_log.out" 2> "$go_log" &
go_pid=$!

bash "$here/scripts/bootstrap-python.sh"
bash "$here/scripts/images/build.sh"

if ! wait "$go_pid"; then
  echo "setup: building Kubernetes, the registry, Kueue or Karpenter failed; the end of $go_log:" >&2
  tail -n 30 "$go_log" >&2
  exit 1
fi
echo "setup: Kubernetes, the registry, Kueue and Karpenter in $(paste -sd ' ' "$go_log.out")"
