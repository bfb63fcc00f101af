#!/usr/bin/env bash
# Builds every image the local cluster runs for this project, into its podman storage:
#   1. the local cluster's own, the pod sandbox image (localcluster/images/build.sh)
#   2. stand-ins for the two upstream bases, tagged with the exact references of the
#      FROM lines, since no image registry is reachable (see the README's "Images"):
#        python:3.11.10-slim-bookworm            <- python-standin.sh (mmdebstrap)
#        nvcr.io/nvidia/tensorflow:24.03-tf2-py3 <- tensorflow/Dockerfile
#   3. the project's images from its two Dockerfiles, unchanged (what users build):
#        distributetrain/manager:0.1.0, distributetrain/base:0.1.0
# Layers are reused when nothing changed: a warm run takes seconds and prints one line
# per image (built / reused). Full build output goes to $DT_CACHE/logs/images.log.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=../env.sh
source "$repo/scripts/env.sh"
# shellcheck source=../../localcluster/images/podman-build.sh
source "$repo/localcluster/images/podman-build.sh"

PYTHON_BASE=docker.io/library/python:3.11.10-slim-bookworm
TENSORFLOW_BASE=nvcr.io/nvidia/tensorflow:24.03-tf2-py3
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml")"
MANAGER_IMAGE="distributetrain/manager:$VERSION"
BASE_IMAGE="distributetrain/base:$VERSION"
log="$DT_CACHE/logs/images.log"
mkdir -p "$(dirname "$log")"
: > "$log"
bash "$repo/localcluster/images/build.sh"

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

build " (stand-in)" "$TENSORFLOW_BASE" "$here/tensorflow"
build "" "$MANAGER_IMAGE" -f "$repo/manager_image/Dockerfile" "$repo"
build "" "$BASE_IMAGE" "$repo/base_image"
# Rebuilt images leave their old layers untagged: reclaim the space.
podman image prune --force >> "$log" 2>&1 || true
