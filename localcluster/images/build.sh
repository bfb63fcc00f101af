#!/usr/bin/env bash
# The local cluster's own image, into its podman storage (written by podman-config.sh):
#   registry.k8s.io/pause:3.10, the pod sandbox image every node's containerd pulls first
#   (a static Go binary, FROM scratch: no registry is reachable to pull one).
# `up` publishes it to the cluster's registry with every other image podman holds.
# Layers are reused when nothing changed: a warm run takes seconds and prints one line.
# Full build output goes to $DT_CACHE/logs/images.log (appended: the project's images
# build logs there too).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../env.sh
source "$here/../env.sh"
# shellcheck source=podman-build.sh
source "$here/podman-build.sh"
bash "$here/podman-config.sh"

PAUSE_IMAGE=registry.k8s.io/pause:3.10
log="$DT_CACHE/logs/images.log"
mkdir -p "$(dirname "$log")"

pause_context="$DT_CACHE/pause-context"
mkdir -p "$pause_context"
(cd "$here/pause" && CGO_ENABLED=0 GOCACHE="$DT_CACHE/gocache" GOFLAGS=-mod=mod \
  go build -trimpath -ldflags="-s -w" -o "$pause_context/pause" .) >> "$log" 2>&1
cp "$here/pause/Dockerfile" "$pause_context/Dockerfile"
build "" "$PAUSE_IMAGE" "$pause_context"
