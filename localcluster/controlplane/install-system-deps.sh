#!/usr/bin/env bash
# Installs the Debian packages the local cluster needs: iproute2 (bridge, veths,
# netns), containerd with runc and the CNI plugins (the nodes' container runtime),
# podman (the image builder), mmdebstrap (the root filesystem of the python base
# stand-in), openssh-client (the ssh-keygen the unit tests check the job's keys
# with), shellcheck (the tests lint every shell script), ipset (kube-router, the
# nodes' NetworkPolicy controller with `up --network-policy`, writes its address
# sets with it) and libnss-wrapper (the unit tests run the job pods' user script with it,
# as the base image does). Not etcd: build.sh builds the one these Kubernetes modules require.
# Idempotent. The cluster runs one containerd per node, so the package's system
# service must never be left running: service starts are denied during the install.
set -euo pipefail

PACKAGES=(iproute2 podman runc containerd containernetworking-plugins mmdebstrap openssh-client
          shellcheck ipset libnss-wrapper)
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

# Belt and braces: a system containerd would start after a reboot.
if command -v systemctl >/dev/null; then
    systemctl disable --now containerd >/dev/null 2>&1 \
        || rm -f /etc/systemd/system/multi-user.target.wants/containerd.service
fi
