#!/usr/bin/env bash
# Builds the example DRA driver's kubelet plugin into the shared cache, keyed by a hash of
# this module and this script, so a fresh clone on the same machine reuses it (about 4
# minutes cold, less once the control plane's build has filled the Go caches).
# Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../env.sh
source "$HERE/../env.sh"

VERSION="$(awk '$1 == "require" && $2 == "sigs.k8s.io/dra-example-driver" {print $3}' "$HERE/go.mod")"
SOURCE_HASH="$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/tools.go" "$HERE/build.sh" | sha256sum | cut -c1-12)"
OUT="$DT_CACHE/dra/bin/dra-example-kubeletplugin-$VERSION-$SOURCE_HASH"

if [[ ! -x "$OUT" ]]; then
    export GOMODCACHE="$DT_CACHE/gomod" GOCACHE="$DT_CACHE/gocache" GOFLAGS=-mod=mod
    echo "building the example DRA driver's kubelet plugin $VERSION (about 4 minutes the first time)" >&2
    mkdir -p "$(dirname "$OUT")"
    (cd "$HERE" && go build -trimpath -ldflags="-s -w" -o "$OUT.tmp" \
        sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin) >&2
    mv "$OUT.tmp" "$OUT"
fi
echo "$OUT"
