#!/usr/bin/env bash
# Installs the CPU training stack (TensorFlow 2.15 + Horovod 0.28.1 with Gloo) into one
# Python environment. The GPU base image already ships both, so the Dockerfile does not
# run this; it exists so machines without Docker or GPUs (development, CI, the local
# cluster whose pods run on the host's environment) train with the same versions.
#
# Usage: install-python.sh [PYTHON]   (default: $DT_VENV/bin/python from scripts/env.sh)
# Idempotent: a stamp keyed on the pins skips the slow Horovod build when nothing changed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -f "$here/../scripts/env.sh" ]; then source "$here/../scripts/env.sh"; fi
python="${1:-${DT_VENV:?set DT_VENV or pass a python}/bin/python}"

# TensorFlow 2.15 is the last release on Keras 2 (tf.keras), which Horovod 0.28.1's
# Keras integration needs; its dependencies are pinned so nothing drifts to numpy 2 or
# Keras 3.
tensorflow_pins=(
  tensorflow-cpu==2.15.1
  keras==2.15.0
  tensorboard==2.15.2
  tensorflow-estimator==2.15.0
  numpy==1.26.4
  protobuf==4.25.3
  ml-dtypes==0.3.2
  wrapt==1.14.1
  h5py==3.10.0
)
# Horovod's own runtime requirements, installed first because Horovod itself is built
# without dependency resolution (its [tensorflow] extra would pull the newest TF).
horovod_runtime_pins=(cloudpickle==3.0.0 psutil==5.9.8 pyyaml==6.0.2 packaging==24.2)
horovod_pin=horovod==0.28.1
build_tool_pins=(setuptools==75.1.0 wheel==0.44.0)

prefix="$("$python" -c 'import sys; print(sys.prefix)')"

horovod_loads() { "$python" -c 'import horovod.tensorflow' >/dev/null 2>&1; }

pins_installed() {
  "$python" - "$@" <<'PY'
import sys
from importlib import metadata

def installed_version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

sys.exit(any(installed_version(name) != version for name, version in (pin.split("==") for pin in sys.argv[1:])))
PY
}

all_pins=("${build_tool_pins[@]}" "${tensorflow_pins[@]}" "${horovod_runtime_pins[@]}" "$horovod_pin")
# Records that this script completed with these pins (and Horovod's build flags below).
stamp="$prefix/.distributetrain-training-stack-$(printf '%s\n' "${all_pins[@]}" | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && pins_installed "${all_pins[@]}" && horovod_loads; then
  echo "training stack up to date ($stamp)"
else
  "$python" -m pip install --no-cache-dir "${build_tool_pins[@]}" "${tensorflow_pins[@]}" "${horovod_runtime_pins[@]}"
  # A Horovod built against another TensorFlow fails to load and must be rebuilt.
  rebuild=()
  if ! horovod_loads; then rebuild=(--force-reinstall); fi
  # Gloo replaces MPI for the collective layer and for launching over SSH, so no MPI
  # install is needed; the other frameworks are excluded to keep the build short.
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
    "$python" -m pip install --no-build-isolation --no-cache-dir --no-deps "${rebuild[@]}" "$horovod_pin"
  rm -f "$prefix"/.distributetrain-training-stack-*
  touch "$stamp"
fi

"$(dirname "$python")/horovodrun" --check-build
