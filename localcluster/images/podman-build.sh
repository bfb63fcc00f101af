# shellcheck shell=bash
# Sourced by the image builds (build.sh here, the project's scripts/images/build.sh): one
# podman build that says whether the image was built or reused, its full output in $log.
# shellcheck disable=SC2154  # $log is the sourcing script's
image_id() { podman image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

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
