# shellcheck shell=bash
# Sourced by every script: the places the local cluster keeps outside the checkout (its
# cache of slow builds, the venv, the run directory, podman's configuration), as
# localcluster/env.sh sets them.
# shellcheck source=../localcluster/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../localcluster/env.sh"
