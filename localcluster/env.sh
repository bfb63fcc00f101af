# shellcheck shell=bash
# Sourced by every script of the local cluster (and by scripts/env.sh): where it keeps
# what it builds outside the checkout, so a fresh clone on the same machine reuses the
# slow builds (images, Kubernetes); the venv it runs from; its run directory.
DT_CACHE="${DT_CACHE:-$HOME/.cache/distributetrain}"
DT_VENV="${DT_VENV:-$DT_CACHE/venv}"
DT_RUN="${DT_RUN:-/tmp/distributetrain-cluster}"
# The project's own podman storage and configuration (images/podman-config.sh).
DT_CONTAINERS="$DT_CACHE/containers"
DT_CONTAINERS_RUN="${DT_CONTAINERS_RUN:-/run/distributetrain-containers}"
CONTAINERS_CONF="$DT_CONTAINERS/containers.conf"
CONTAINERS_STORAGE_CONF="$DT_CONTAINERS/storage.conf"
CONTAINERS_REGISTRIES_CONF="$DT_CONTAINERS/registries.conf"
export DT_CACHE DT_VENV DT_RUN DT_CONTAINERS DT_CONTAINERS_RUN
export CONTAINERS_CONF CONTAINERS_STORAGE_CONF CONTAINERS_REGISTRIES_CONF
