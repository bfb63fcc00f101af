#!/usr/bin/env bash
# Creates the project's virtualenv (manager package, local cluster, test tools) in the
# cache directory. Training runs only in the images, so it has no TensorFlow or Horovod.
# The local cluster is a project of its own (localcluster/pyproject.toml), installed
# editable as distributetrain is: it builds its Go modules from its own folder.
# A stamp of the pins and the checkout skips pip entirely when nothing changed.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/env.sh"
stamp="$DT_VENV/.distributetrain-$(cat "$here/requirements-dev.txt" "$here/manager_image/requirements.txt" \
  "$here/pyproject.toml" "$here/localcluster/pyproject.toml" <(echo "$here") | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
  echo "venv: $DT_VENV reused"
  exit 0
fi
if [ ! -x "$DT_VENV/bin/python" ]; then
  python3.11 -m venv "$DT_VENV"
  "$DT_VENV/bin/pip" install -q --upgrade pip==24.2 setuptools==75.1.0 wheel==0.44.0
fi
# The manager's dependencies exactly as its image pins them.
"$DT_VENV/bin/pip" install -q -r "$here/requirements-dev.txt" -c "$here/manager_image/requirements.txt" kubernetes
"$DT_VENV/bin/pip" install -q --no-deps -e "$here" -e "$here/localcluster"
rm -f "$DT_VENV"/.distributetrain-*
touch "$stamp"
echo "venv: $DT_VENV updated"
