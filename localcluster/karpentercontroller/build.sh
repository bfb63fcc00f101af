#!/usr/bin/env bash
# Builds Karpenter's core with the local cloud provider into the shared cache, keyed by a
# hash of this module's sources and this script, so a fresh clone on the same machine reuses
# it (about 2 minutes cold, once the control plane's build has filled the Go caches).
# Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../env.sh
source "$HERE/../env.sh"

VERSION="$(awk '{for (i = 1; i < NF; i++) if ($i == "sigs.k8s.io/karpenter") {print $(i + 1); exit}}' "$HERE/go.mod")"
SOURCE_HASH="$(cd "$HERE" && cat go.mod go.sum main.go cloudprovider/*.go build.sh | sha256sum | cut -c1-12)"
OUT="$DT_CACHE/karpenter/bin/karpenter-$VERSION-$SOURCE_HASH"

if [[ ! -x "$OUT" ]]; then
    export GOMODCACHE="$DT_CACHE/gomod" GOCACHE="$DT_CACHE/gocache" GOFLAGS=-mod=mod
    echo "building Karpenter $VERSION (about 2 minutes the first time)" >&2
    mkdir -p "$(dirname "$OUT")"
    (cd "$HERE" && go build -trimpath -ldflags="-s -w" -o "$OUT.tmp" .) >&2
    mv "$OUT.tmp" "$OUT"
fi
echo "$OUT"
