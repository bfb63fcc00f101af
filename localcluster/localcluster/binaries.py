"""Finding (and, the first time, building or installing) the cluster's executables.

The Kubernetes binaries (control plane, kubelet, kube-proxy) and etcd of the chosen
release come from controlplane/build.sh, the registry from registryserver/build.sh
(Kueue, Karpenter, the example DRA driver's kubelet plugin and the DRA nodes' containerd
from theirs), each returning at once when its cache entry exists; containerd and the CNI
plugins come from Debian, installed by install-system-deps.sh when missing.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

from localcluster.components import Binaries
from localcluster.layout import CONTROLPLANE_SRC, PROJECT_ROOT
from localcluster.versions import KubernetesVersion

log = logging.getLogger(__name__)

BUILD_SCRIPT = CONTROLPLANE_SRC / "build.sh"
REGISTRY_BUILD_SCRIPT = PROJECT_ROOT / "registryserver" / "build.sh"
KUEUE_BUILD_SCRIPT = PROJECT_ROOT / "kueuecontroller" / "build.sh"
KARPENTER_BUILD_SCRIPT = PROJECT_ROOT / "karpentercontroller" / "build.sh"
KUBE_ROUTER_BUILD_SCRIPT = PROJECT_ROOT / "kuberoutercontroller" / "build.sh"
DRA_PLUGIN_BUILD_SCRIPT = PROJECT_ROOT / "drakubeletplugin" / "build.sh"
CONTAINERD_BUILD_SCRIPT = PROJECT_ROOT / "containerdruntime" / "build.sh"
SYSTEM_DEPS_SCRIPT = CONTROLPLANE_SRC / "install-system-deps.sh"
# What real nodes need from Debian: containerd and the CNI plugins.
SYSTEM_PATHS = (Path("/usr/bin/containerd"), Path("/usr/lib/cni/bridge"))


class BuildError(RuntimeError):
    """The control plane could not be built or its dependencies installed."""


def ensure(version: KubernetesVersion) -> Binaries:
    """Kubernetes `version`'s binaries (built on first use: 10-25 minutes) and the registry."""
    install_system_deps()
    return Binaries(kubernetes_bin=_built(BUILD_SCRIPT, str(version)), registry=_built(REGISTRY_BUILD_SCRIPT))


def kueue() -> Path:
    """Kueue's controller manager, built from its Go module on first use (about 7 minutes)."""
    return _built(KUEUE_BUILD_SCRIPT)


def karpenter() -> Path:
    """Karpenter's core with the local cloud provider, built from its Go module on first use
    (about 2 minutes once the control plane's build has filled the Go caches)."""
    return _built(KARPENTER_BUILD_SCRIPT)


def kube_router() -> Path:
    """kube-router, the nodes' NetworkPolicy controller (``localcluster.networkpolicy``),
    built from its Go module on first use; it writes its address sets with Debian's `ipset`."""
    if shutil.which("ipset") is None:
        log.info("installing ipset")
        if subprocess.run([str(SYSTEM_DEPS_SCRIPT)], check=False).returncode != 0:
            raise BuildError(f"{SYSTEM_DEPS_SCRIPT} failed; see its output above")
    return _built(KUBE_ROUTER_BUILD_SCRIPT)


def dra_plugin() -> Path:
    """The example DRA driver's kubelet plugin (``localcluster.dra``), built from its Go module on
    first use (about 4 minutes)."""
    return _built(DRA_PLUGIN_BUILD_SCRIPT)


def cdi_containerd() -> Path:
    """The bin directory of containerd 1.7 and its runc shim, which DRA nodes run for CDI
    (``localcluster.dra``), built from containerd's Go module on first use."""
    return _built(CONTAINERD_BUILD_SCRIPT)


def _built(script: Path, *args: str) -> Path:
    """What `script` builds (its last line of output), building it first if needed."""
    result = subprocess.run([str(script), *args], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"{script} failed with exit code {result.returncode}; see its output above")
    return Path(result.stdout.strip().splitlines()[-1])


def install_system_deps() -> None:
    if not (all(path.exists() for path in SYSTEM_PATHS) and shutil.which("ip")):
        log.info("installing containerd, the CNI plugins and iproute2")
        if subprocess.run([str(SYSTEM_DEPS_SCRIPT)], check=False).returncode != 0:
            raise BuildError(f"{SYSTEM_DEPS_SCRIPT} failed; see its output above")
