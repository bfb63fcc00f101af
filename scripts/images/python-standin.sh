#!/usr/bin/env bash
# Stand-in for python:3.11.10-slim-bookworm (manager_image/'s base), made from Debian
# bookworm's own packages with mmdebstrap, since no image registry is reachable here.
# Same distribution and Python minor version as upstream; differences (README):
# Python is Debian's 3.11.2 in /usr/bin (python, python3, pip, pip3 on PATH), not
# 3.11.10 built into /usr/local. It trusts the host's CA certificates, so `pip install`
# in a build works through a TLS-intercepting proxy, and uses the host's apt sources.
# Usage: python-standin.sh TAG   (imports the root filesystem into podman storage)
set -euo pipefail
tag="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

sources=()
for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  if [ -s "$file" ]; then sources+=("$file"); fi
done
aptopts=()
for file in /etc/apt/apt.conf.d/*; do
  # Keep the host's acquire settings (e.g. a snapshot mirror's Check-Valid-Until).
  if grep -qs '^Acquire::' "$file"; then aptopts+=("--aptopt=$file"); fi
done
mkdir -p "$work/ca"
cp /usr/local/share/ca-certificates/*.crt "$work/ca/" 2>/dev/null || true

mmdebstrap --quiet --variant=minbase --format=tar \
  --include=python3,python3-pip,python-is-python3,ca-certificates \
  "${aptopts[@]}" \
  --customize-hook="mkdir -p \"\$1/usr/local/share/ca-certificates\"" \
  --customize-hook="cp $work/ca/. \"\$1/usr/local/share/ca-certificates/\" -r" \
  --customize-hook='chroot "$1" update-ca-certificates >/dev/null 2>&1' \
  --customize-hook='ln -sf pip3 "$1/usr/bin/pip"' \
  --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
  --customize-hook='rm -rf "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/var/cache/apt/*' \
  bookworm "$work/rootfs.tar" "${sources[@]}"

podman import --quiet \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PYTHON_VERSION=3.11.2' \
  --change 'CMD ["python3"]' \
  "$work/rootfs.tar" "$tag" >/dev/null
