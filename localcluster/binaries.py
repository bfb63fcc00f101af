"""Finding (and, the first time, building or installing) the cluster's executables.

The Kubernetes binaries come from localcluster/controlplane/build.sh, which
returns at once when its cache entry exists; etcd comes from Debian's
etcd-server, installed by install-system-deps.sh when missing.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

from localcluster.components import Binaries
from localcluster.layout import CONTROLPLANE_SRC

log = logging.getLogger(__name__)

BUILD_SCRIPT = CONTROLPLANE_SRC / "build.sh"
SYSTEM_DEPS_SCRIPT = CONTROLPLANE_SRC / "install-system-deps.sh"
ETCD_PATH = Path("/usr/bin/etcd")


class BuildError(RuntimeError):
    """The control plane could not be built or its dependencies installed."""


def ensure() -> Binaries:
    return Binaries(kubernetes_bin=kubernetes_bin_dir(), etcd=etcd_path())


def kubernetes_bin_dir() -> Path:
    """The cached bin dir, building it first if needed (10-25 min on 2 cores)."""
    result = subprocess.run([str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"{BUILD_SCRIPT} failed with exit code {result.returncode}; see its output above")
    return Path(result.stdout.strip().splitlines()[-1])


def etcd_path() -> Path:
    if not (ETCD_PATH.exists() and shutil.which("ip")):
        log.info("installing etcd and iproute2")
        if subprocess.run([str(SYSTEM_DEPS_SCRIPT)], check=False).returncode != 0:
            raise BuildError(f"{SYSTEM_DEPS_SCRIPT} failed; see its output above")
    return ETCD_PATH
