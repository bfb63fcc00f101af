#!/usr/bin/env bash
# Builds Kueue's controller manager into the shared cache, keyed by a hash of this module
# and this script, so a fresh clone on the same machine reuses it (about 7 minutes cold).
# Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../env.sh
source "$HERE/../env.sh"

VERSION="$(awk '$1 == "require" && $2 == "sigs.k8s.io/kueue" {print $3}' "$HERE/go.mod")"
SOURCE_HASH="$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/tools.go" "$HERE/build.sh" | sha256sum | cut -c1-12)"
OUT="$DT_CACHE/kueue/bin/kueue-$VERSION-$SOURCE_HASH"

if [[ ! -x "$OUT" ]]; then
    # scheduler-library, a dependency of Kueue's, is not in the checksum database.
    export GOMODCACHE="$DT_CACHE/gomod" GOCACHE="$DT_CACHE/gocache" GOFLAGS=-mod=mod \
        GONOSUMDB=sigs.k8s.io/scheduler-library
    echo "building Kueue $VERSION (about 7 minutes the first time)" >&2
    mkdir -p "$(dirname "$OUT")"
    (cd "$HERE" && go build -trimpath -ldflags="-s -w" -o "$OUT.tmp" sigs.k8s.io/kueue/cmd/kueue) >&2
    mv "$OUT.tmp" "$OUT"
fi
echo "$OUT"
