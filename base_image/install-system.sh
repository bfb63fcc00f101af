#!/usr/bin/env bash
# Installs the system packages a training pod needs: the OpenSSH server the workers run
# for horovodrun, the client the chief uses, ps/ip for Horovod's process and interface
# handling, and nss_wrapper, by which ssh and sshd know a UID the image has no
# /etc/passwd entry for (the one OpenShift assigns, any --run-as-user: the pod scripts
# preload it). Run by the Dockerfile.
#
# Installing openssh-server must not leave a system sshd on port 22 running: pods start
# their own sshd on the job's port, and on a development host a stray daemon would be
# a surprise. A policy-rc.d that returns 101 ("action forbidden") stops the package
# scripts from starting it. The host's /etc/ssh/sshd_config is left as the package
# makes it; pods run sshd with their own config file (-f), so it is never used.
set -euo pipefail
packages=(openssh-server openssh-client procps iproute2 libnss-wrapper)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "system packages already installed: ${packages[*]}"
  exit 0
fi

policy=/usr/sbin/policy-rc.d
installed_policy=false
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# Added by distributetrain install-system.sh while installing packages.\nexit 101\n' > "$policy"
  chmod 0755 "$policy"
  installed_policy=true
fi
sshd_running_before="$(pgrep -x sshd || true)"
remove_policy() { if "$installed_policy"; then rm -f "$policy"; fi; }
trap remove_policy EXIT

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"

# Belt and braces for init systems that ignore policy-rc.d: stop only a daemon that
# this install started, never one that was already serving the host.
if [ -z "$sshd_running_before" ] && [ -f /run/sshd.pid ]; then
  started_pid="$(cat /run/sshd.pid)"
  if [ "$(ps -o comm= -p "$started_pid" 2>/dev/null)" = sshd ]; then kill "$started_pid"; fi
fi
