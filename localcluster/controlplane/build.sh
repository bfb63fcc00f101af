#!/usr/bin/env bash
# Builds the upstream Kubernetes control plane (one multi-call binary) of one release
# into the shared cache, keyed by the pinned version and a hash of its wrapper module
# (v<MINOR>/go.mod, go.sum), main.go and this script, so a fresh clone on the same
# machine reuses it and a pin change rebuilds it.
# Usage: build.sh [MINOR]   MINOR is 1.34 (the default: $DT_KUBERNETES_VERSION, else 1.34),
# 1.35, 1.36 or 1.37: the releases with a wrapper module here (pin.sh writes one).
# Prints the bin directory (symlinks kube-apiserver, kube-scheduler,
# kube-controller-manager, kubectl, kubelet, kube-proxy, etcd) on stdout; progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../env.sh
source "$HERE/../env.sh"

COMPONENTS=(kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet kube-proxy etcd)
MINOR="${1:-${DT_KUBERNETES_VERSION:-1.34}}"
MODULE="$HERE/v${MINOR#v}"
if [[ ! "${MINOR#v}" =~ ^1\.[0-9]+$ || ! -f "$MODULE/go.mod" ]]; then
    supported=""
    for module in "$HERE"/v1.*/; do
        module="${module%/}"
        supported+=" ${module##*/v}"
    done
    echo "build.sh: no Kubernetes '$MINOR' here; give MAJOR.MINOR, one of:$supported" >&2
    exit 2
fi
K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' "$MODULE/go.mod")"
SOURCE_HASH="$(cat "$MODULE/go.mod" "$MODULE/go.sum" "$HERE/main.go" "$HERE/build.sh" | sha256sum | cut -c1-12)"
OUT_DIR="$DT_CACHE/k8s/$K8S_VERSION-$SOURCE_HASH"
BIN_DIR="$OUT_DIR/bin"

if [[ -x "$BIN_DIR/controlplane" ]]; then
    echo "$BIN_DIR"
    exit 0
fi

export GOMODCACHE="$DT_CACHE/gomod" GOCACHE="$DT_CACHE/gocache" GOFLAGS=-mod=mod
echo "building Kubernetes $K8S_VERSION control plane into $OUT_DIR (first build: 10-25 min)" >&2

# Stamp the version as upstream's hack/lib/version.sh does, so clients see
# v1.X.Y rather than v0.0.0-master.
MAJOR_MINOR="${K8S_VERSION#v}"
LDFLAGS="-s -w"
for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDFLAGS+=" -X $package.gitVersion=$K8S_VERSION -X $package.gitTreeState=clean"
    LDFLAGS+=" -X $package.gitMajor=${MAJOR_MINOR%%.*} -X $package.gitMinor=$(cut -d. -f2 <<<"$MAJOR_MINOR")"
done

mkdir -p "$OUT_DIR"
rm -rf "$OUT_DIR/bin.tmp"
# go.mod and go.sum are committed tidy, so -mod=mod leaves the checkout unchanged.
(cd "$MODULE" && go build -trimpath -ldflags="$LDFLAGS" -o "$OUT_DIR/bin.tmp/controlplane" .) >&2
for component in "${COMPONENTS[@]}"; do
    ln -s controlplane "$OUT_DIR/bin.tmp/$component"
done
mv "$OUT_DIR/bin.tmp" "$BIN_DIR"
echo "$BIN_DIR"
