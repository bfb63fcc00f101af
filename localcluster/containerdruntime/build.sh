#!/usr/bin/env bash
# Builds containerd and its runc shim (containerd-shim-runc-v2) into the shared cache, keyed
# by a hash of this module and this script, so a fresh clone on the same machine reuses them
# (a few minutes cold). Static, without cgo: the btrfs snapshotter, the only part that needs
# it, is left out (the nodes use overlayfs). Prints the bin directory on stdout; progress
# goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../env.sh
source "$HERE/../env.sh"

VERSION="$(awk '$1 == "require" && $2 == "github.com/containerd/containerd" {print $3}' "$HERE/go.mod")"
SOURCE_HASH="$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/tools.go" "$HERE/build.sh" | sha256sum | cut -c1-12)"
OUT_DIR="$DT_CACHE/containerd/$VERSION-$SOURCE_HASH"
BIN_DIR="$OUT_DIR/bin"

if [[ ! -x "$BIN_DIR/containerd-shim-runc-v2" ]]; then
    export GOMODCACHE="$DT_CACHE/gomod" GOCACHE="$DT_CACHE/gocache" GOFLAGS=-mod=mod CGO_ENABLED=0
    echo "building containerd $VERSION (a few minutes the first time)" >&2
    # What containerd's own Makefile stamps, so the kubelet and `containerd --version` see it.
    LDFLAGS="-s -w -X github.com/containerd/containerd/version.Version=$VERSION"
    LDFLAGS+=" -X github.com/containerd/containerd/version.Package=github.com/containerd/containerd"
    rm -rf "$OUT_DIR/bin.tmp"
    mkdir -p "$OUT_DIR/bin.tmp"
    for command in containerd containerd-shim-runc-v2; do
        (cd "$HERE" && go build -trimpath -ldflags="$LDFLAGS" -o "$OUT_DIR/bin.tmp/$command" \
            "github.com/containerd/containerd/cmd/$command") >&2
    done
    rm -rf "$BIN_DIR"
    mv "$OUT_DIR/bin.tmp" "$BIN_DIR"
fi
echo "$BIN_DIR"
