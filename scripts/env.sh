# Sourced by every script: where the project keeps what it builds outside the checkout,
# so a fresh clone on the same machine reuses the slow builds (Horovod, Kubernetes).
DT_CACHE="${DT_CACHE:-$HOME/.cache/distributetrain}"
DT_VENV="${DT_VENV:-$DT_CACHE/venv}"
DT_RUN="${DT_RUN:-/tmp/distributetrain-cluster}"
export DT_CACHE DT_VENV DT_RUN
