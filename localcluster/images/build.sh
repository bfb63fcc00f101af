#!/usr/bin/env bash
# Builds every image the local cluster runs, into the project's own podman storage:
#   1. stand-ins for the two upstream bases, tagged with the exact references of the
#      FROM lines, since no image registry is reachable (see the README's "Images"):
#        python:3.11.10-slim-bookworm            <- python-standin.sh (mmdebstrap)
#        nvcr.io/nvidia/tensorflow:24.03-tf2-py3 <- tensorflow/Dockerfile
#   2. the project's images from its two Dockerfiles, unchanged (what users build):
#        distributetrain/manager:0.1.0, distributetrain/base:0.1.0
#   3. the pod sandbox image every node's containerd pulls first:
#        registry.k8s.io/pause:3.10 <- pause/ (a static Go binary, FROM scratch)
# Layers are reused when nothing changed: a warm run takes seconds and prints one line
# per image (built / reused). Full build output goes to $DT_CACHE/logs/images.log.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=../../scripts/env.sh
source "$repo/scripts/env.sh"
bash "$here/podman-config.sh"

PAUSE_IMAGE=registry.k8s.io/pause:3.10
PYTHON_BASE=docker.io/library/python:3.11.10-slim-bookworm
TENSORFLOW_BASE=nvcr.io/nvidia/tensorflow:24.03-tf2-py3
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml")"
MANAGER_IMAGE="distributetrain/manager:$VERSION"
BASE_IMAGE="distributetrain/base:$VERSION"
log="$DT_CACHE/logs/images.log"
mkdir -p "$(dirname "$log")"
: > "$log"

image_id() { podman image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

# The python stand-in is imported, not built, so a stamp records which image its
# recipe made: a changed recipe (or a removed image) makes it again.
stamp="$DT_CONTAINERS/python-standin.stamp"
recipe="$(sha256sum "$here/python-standin.sh" | cut -c1-16)"
if [ -n "$(image_id "$PYTHON_BASE")" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$(image_id "$PYTHON_BASE") $recipe" ]; then
  echo "images: $PYTHON_BASE (stand-in) reused"
else
  started=$SECONDS
  if ! bash "$here/python-standin.sh" "$PYTHON_BASE" >> "$log" 2>&1; then
    echo "images: building the $PYTHON_BASE stand-in failed; the end of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  echo "$(image_id "$PYTHON_BASE") $recipe" > "$stamp"
  echo "images: $PYTHON_BASE (stand-in) built in $((SECONDS - started)) s"
fi

build() {  # what, tag, podman build arguments...
  local what="$1" tag="$2" before started
  shift 2
  before="$(image_id "$tag")"
  started=$SECONDS
  echo "=== podman build -t $tag $*" >> "$log"
  if ! podman build --network=host --pull=never --layers -t "$tag" "$@" >> "$log" 2>&1; then
    echo "images: building $tag failed; the end of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  if [ "$(image_id "$tag")" = "$before" ]; then
    echo "images: $tag$what reused"
  else
    echo "images: $tag$what built in $((SECONDS - started)) s"
  fi
}

# The pause binary is built here, not in a Go image: no registry is reachable to pull one.
pause_context="$DT_CACHE/pause-context"
mkdir -p "$pause_context"
(cd "$here/pause" && CGO_ENABLED=0 GOCACHE="$DT_CACHE/gocache" GOFLAGS=-mod=mod \
  go build -trimpath -ldflags="-s -w" -o "$pause_context/pause" .) >> "$log" 2>&1
cp "$here/pause/Dockerfile" "$pause_context/Dockerfile"
build "" "$PAUSE_IMAGE" "$pause_context"
build " (stand-in)" "$TENSORFLOW_BASE" "$here/tensorflow"
build "" "$MANAGER_IMAGE" -f "$repo/manager_image/Dockerfile" "$repo"
build "" "$BASE_IMAGE" "$repo/base_image"
# Rebuilt images leave their old layers untagged: reclaim the space.
podman image prune --force >> "$log" 2>&1 || true
