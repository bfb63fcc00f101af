#!/usr/bin/env bash
# Builds kube-router into the shared cache, keyed by a hash of this module and this script,
# so a fresh clone on the same machine reuses it (about a minute cold, once the control
# plane's build has filled the Go caches). Built on first use only (`localcluster up
# --network-policy`, the network-policy test). Prints the binary's path on stdout;
# progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../env.sh
source "$HERE/../env.sh"

VERSION="$(awk '$1 == "require" && $2 == "github.com/cloudnativelabs/kube-router/v2" {print $3}' "$HERE/go.mod")"
SOURCE_HASH="$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/tools.go" "$HERE/build.sh" | sha256sum | cut -c1-12)"
OUT="$DT_CACHE/kube-router/bin/kube-router-$VERSION-$SOURCE_HASH"

if [[ ! -x "$OUT" ]]; then
    export GOMODCACHE="$DT_CACHE/gomod" GOCACHE="$DT_CACHE/gocache" GOFLAGS=-mod=mod
    echo "building kube-router $VERSION (about a minute the first time)" >&2
    mkdir -p "$(dirname "$OUT")"
    (cd "$HERE" && go build -trimpath -ldflags="-s -w" -o "$OUT.tmp" \
        github.com/cloudnativelabs/kube-router/v2/cmd/kube-router) >&2
    mv "$OUT.tmp" "$OUT"
fi
echo "$OUT"
