#!/usr/bin/env bash
# Writes the wrapper module of one Kubernetes release, v<MAJOR>.<MINOR>/go.mod and go.sum,
# from that release's own go.mod: k8s.io/kubernetes at VERSION, each staging module it
# replaces with ./staging pinned to the published v0.<MINOR>.<PATCH> instead (the sample-*
# modules aside: nothing here imports them), etcd's server and cobra at the versions the
# release requires; then tidies it. main.go is shared (a symlink): build.sh builds it.
# Usage: pin.sh v1.36.3   (then commit v1.36/; build.sh 1.36 builds it)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../env.sh
source "$HERE/../env.sh"

VERSION="${1:?usage: pin.sh vMAJOR.MINOR.PATCH, e.g. v1.36.3}"
if [[ ! "$VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
    echo "pin.sh: VERSION must be vMAJOR.MINOR.PATCH, e.g. v1.36.3; got '$VERSION'" >&2
    exit 2
fi
STAGING_VERSION="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
DIR="$HERE/v1.${BASH_REMATCH[1]}"
export GOMODCACHE="$DT_CACHE/gomod" GOCACHE="$DT_CACHE/gocache" GOFLAGS=-mod=mod

upstream_mod="$(cd "$HERE" && go mod download -json "k8s.io/kubernetes@$VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')"
required() { awk -v module="$1" '$1 == module && $2 ~ /^v/ {print $2; exit}' "$upstream_mod"; }
go_version="$(awk '$1 == "go" {print $2; exit}' "$upstream_mod")"
staging=()
while read -r module; do
    staging+=("$module")
done < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// && $1 !~ /sample-/ {print $1}' "$upstream_mod" | sort)

mkdir -p "$DIR"
{
    echo "// The wrapper module of Kubernetes $VERSION (written by ../pin.sh): see ../README.md."
    echo "module distributetrain.local/localcluster/controlplane"
    echo
    echo "go $go_version"
    echo
    echo "require ("
    echo "	github.com/spf13/cobra $(required github.com/spf13/cobra)"
    echo "	go.etcd.io/etcd/server/v3 $(required go.etcd.io/etcd/server/v3)"
    echo "	k8s.io/component-base $STAGING_VERSION"
    echo "	k8s.io/kubectl v0.0.0"
    echo "	k8s.io/kubernetes $VERSION"
    echo ")"
    echo
    echo "replace ("
    for module in "${staging[@]}"; do
        echo "	$module => $module $STAGING_VERSION"
    done
    echo ")"
} > "$DIR/go.mod"
ln -sfn ../main.go "$DIR/main.go"
rm -f "$DIR/go.sum"
(cd "$DIR" && go mod tidy)
echo "pinned $VERSION in $DIR" >&2
