#!/usr/bin/env bash
# Everything `make demo` needs on a fresh machine, each step cached: Debian packages, the
# project venv (manager package and test tools), the images the local cluster runs (built
# with podman from the project's Dockerfiles on local stand-ins for their upstream bases),
# the upstream Kubernetes control plane and node components and the image registry
# (built with Go). Optional parts are built only when named: `kueue`, `karpenter`, `kube-router`,
# `dra` (the example DRA driver's kubelet plugin and the DRA nodes' containerd 1.7)
# (`make test` and `make demo-queue` name what they use; the demo needs neither, and
# localcluster would build one on first use). The slow builds run side by side; each
# step prints one line, its tools' output goes to $DT_CACHE/logs.
# Usage: scripts/setup.sh [kueue] [karpenter] [kube-router] [dra]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/env.sh"
mkdir -p "$DT_CACHE/logs"

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: the local cluster needs root (bridge, network namespaces, mounts, containers)" >&2
  exit 1
fi

bash "$here/localcluster/controlplane/install-system-deps.sh"

go_parts=(controlplane registryserver)
names="Kubernetes, the registry"
for part in "$@"; do
  case "$part" in
    kueue) go_parts+=(kueuecontroller); names+=", Kueue" ;;
    karpenter) go_parts+=(karpentercontroller); names+=", Karpenter" ;;
    kube-router) go_parts+=(kuberoutercontroller); names+=", kube-router" ;;
    dra) go_parts+=(drakubeletplugin containerdruntime); names+=", the DRA plugin, containerd 1.7" ;;
    *) echo "setup: unknown part '$part' (valid: kueue, karpenter, kube-router, dra)" >&2; exit 2 ;;
  esac
done

# The Go builds share one build cache: each waits for the one before (the control plane's first).
go_log="$DT_CACHE/logs/go-build.log"
(
  for part in "${go_parts[@]}"; do
    bash "$here/localcluster/$part/build.sh" || exit 1
  done
) > "$go_log.out" 2> "$go_log" &
go_pid=$!

bash "$here/scripts/bootstrap-python.sh"
bash "$here/scripts/images/build.sh"

if ! wait "$go_pid"; then
  echo "setup: building $names failed; the end of $go_log:" >&2
  tail -n 30 "$go_log" >&2
  exit 1
fi
echo "setup: $names in $(paste -sd ' ' "$go_log.out")"
