#!/usr/bin/env bash
# Builds the CNCF distribution registry into the shared cache, keyed by a hash of this
# module and this script, so a fresh clone on the same machine reuses it.
# Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../env.sh
source "$HERE/../env.sh"

VERSION="$(awk '{for (i = 1; i < NF; i++) if ($i == "github.com/distribution/distribution/v3") print $(i + 1)}' "$HERE/go.mod")"
SOURCE_HASH="$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/main.go" "$HERE/build.sh" | sha256sum | cut -c1-12)"
OUT="$DT_CACHE/registry/bin/registry-$VERSION-$SOURCE_HASH"

if [[ ! -x "$OUT" ]]; then
    export GOMODCACHE="$DT_CACHE/gomod" GOCACHE="$DT_CACHE/gocache" GOFLAGS=-mod=mod
    echo "building the distribution registry $VERSION (about a minute)" >&2
    mkdir -p "$(dirname "$OUT")"
    (cd "$HERE" && go build -trimpath -ldflags="-s -w" -o "$OUT.tmp" .) >&2
    mv "$OUT.tmp" "$OUT"
fi
echo "$OUT"
