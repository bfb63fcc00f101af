#!/usr/bin/env bash
# Installs the Debian packages the local cluster needs: etcd (the apiserver's
# store), iproute2 (bridge, veths, netns), containerd with runc and the CNI
# plugins (the nodes' container runtime), podman (the image builder),
# mmdebstrap (the root filesystem of the python base stand-in), openssh-client
# (the ssh-keygen the unit tests check the job's keys with), shellcheck (the
# tests lint every shell script) and ipset (kube-router, the nodes' NetworkPolicy
# controller with `up --network-policy`, writes its address sets with it). Idempotent. The cluster runs its own etcd under
# $DT_RUN and one containerd per node, so the packages' system services must never
# be left running: service starts are denied during the install and any etcd the
# package started anyway is stopped.
set -euo pipefail

PACKAGES=(etcd-server iproute2 podman runc containerd containernetworking-plugins mmdebstrap openssh-client
          shellcheck ipset)
POLICY_RC_D=/usr/sbin/policy-rc.d

missing=()
for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$package")
done
if ((${#missing[@]} == 0)); then
    exit 0
fi

# policy-rc.d exit code 101 = "action forbidden": invoke-rc.d will not start services.
created_policy=0
if [[ ! -e "$POLICY_RC_D" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$POLICY_RC_D"
    chmod +x "$POLICY_RC_D"
    created_policy=1
fi
cleanup() {
    if ((created_policy)); then rm -f "$POLICY_RC_D"; fi
}
trap cleanup EXIT

# apt's and dpkg's output go to a log: the set-up prints one line per step.
log="${DT_CACHE:-$HOME/.cache/distributetrain}/logs/apt.log"
mkdir -p "$(dirname "$log")"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    echo "packages: installing ${missing[*]} failed; the end of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
fi
echo "packages: installed ${missing[*]}"

# Belt and braces: a system etcd would hold the default ports and data dir,
# now or after a reboot.
if command -v systemctl >/dev/null; then
    for service in etcd containerd; do
        systemctl disable --now "$service" >/dev/null 2>&1 \
            || rm -f "/etc/systemd/system/multi-user.target.wants/$service.service"
    done
    rm -f /etc/systemd/system/etcd2.service
fi
# The packaged daemon is configured through /etc/default/etcd, never with
# --data-dir, which is how the clusters' own etcd processes are told apart.
for pid in $(pgrep -x etcd || true); do
    if ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- '--data-dir'; then
        kill "$pid" || true
    fi
done
