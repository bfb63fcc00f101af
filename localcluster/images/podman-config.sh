#!/usr/bin/env bash
# Writes the project's own podman configuration under $DT_CACHE/containers, so that
# builds and the tests' containers never touch the host's podman set-up:
#   storage.conf    overlay storage in the cache (vfs copies every layer: 5x slower)
#   containers.conf runc with cgroupfs (crun fails on hybrid cgroups), the ulimits this
#                   machine allows, no network of podman's own (it would add a bridge and
#                   iptables rules to the host), containerd's default capabilities
#   registries.conf no registry is reachable: nothing is ever pulled, names resolve locally
# Idempotent; env.sh points CONTAINERS_CONF, CONTAINERS_STORAGE_CONF and
# CONTAINERS_REGISTRIES_CONF at these files.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../env.sh
source "$here/../env.sh"
mkdir -p "$DT_CONTAINERS/storage" "$DT_CONTAINERS_RUN"

write_if_changed() {  # path, content: rewrite only on change, so a warm set-up is silent
  if [ ! -f "$1" ] || [ "$(cat "$1")" != "$2" ]; then printf '%s\n' "$2" > "$1"; fi
}

write_if_changed "$CONTAINERS_STORAGE_CONF" "[storage]
driver = \"overlay\"
graphroot = \"$DT_CONTAINERS/storage\"
runroot = \"$DT_CONTAINERS_RUN/storage\""

write_if_changed "$CONTAINERS_CONF" "[containers]
netns = \"none\"
default_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]
# containerd's defaults (what a pod gets on a real node): podman's own lack
# AUDIT_WRITE, MKNOD and NET_RAW.
default_capabilities = [\"AUDIT_WRITE\", \"CHOWN\", \"DAC_OVERRIDE\", \"FOWNER\", \"FSETID\", \"KILL\",
  \"MKNOD\", \"NET_BIND_SERVICE\", \"NET_RAW\", \"SETFCAP\", \"SETGID\", \"SETPCAP\", \"SETUID\", \"SYS_CHROOT\"]
log_driver = \"k8s-file\"

[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"
events_logfile_path = \"$DT_CONTAINERS_RUN/events.log\"
tmp_dir = \"$DT_CONTAINERS_RUN/libpod\"
volume_path = \"$DT_CONTAINERS/volumes\"

[network]
network_config_dir = \"$DT_CONTAINERS/networks\""

write_if_changed "$CONTAINERS_REGISTRIES_CONF" "# Nothing is pulled: base images are local stand-ins tagged with their upstream names.
unqualified-search-registries = [\"docker.io\"]
short-name-mode = \"permissive\""
