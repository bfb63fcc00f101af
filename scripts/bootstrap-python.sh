#!/usr/bin/env bash
# Creates the project's virtualenv (manager package, test tools) in the cache directory.
# The training stack (TensorFlow + Horovod) is added by base_image/install-python.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/env.sh"
if [ ! -x "$DT_VENV/bin/python" ]; then
  python3.11 -m venv "$DT_VENV"
  "$DT_VENV/bin/pip" install -q --upgrade pip==24.2 setuptools==75.1.0 wheel==0.44.0
fi
"$DT_VENV/bin/pip" install -q -r "$here/requirements-dev.txt"
"$DT_VENV/bin/pip" install -q --no-deps -e "$here"
"$DT_VENV/bin/pip" install -q "kubernetes==34.1.0"
# manager.sh stands on PATH in the manager image; the local cluster runs pods with this venv.
ln -sf "$here/manager_image/manager.sh" "$DT_VENV/bin/manager.sh"
