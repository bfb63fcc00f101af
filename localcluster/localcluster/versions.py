"""The Kubernetes releases the local cluster runs, and which one a cluster runs.

Each release has a wrapper module of its own, controlplane/v<MAJOR>.<MINOR>/ (written by
controlplane/pin.sh from the release's own go.mod), pinning one patch release; they share
controlplane/main.go. `up --kubernetes 1.36`, or DT_KUBERNETES_VERSION=1.36 for tests and
`make`, chooses one; 1.34 by default, the one CI runs. A cluster keeps the release it was
started with (RunLayout.kubernetes_version_file), so a process that attaches to it later
(a test session, the Karpenter nodes' launcher) runs the same binaries on its nodes.

Nothing in the components' flags and configuration differs between these releases (checked
in each release's source and by `make test-versions`): every flag components.py passes is
defined in 1.37 too, as is every KubeletConfiguration and KubeProxyConfiguration (v1alpha1)
field node/config.py writes; `failCgroupV1: false`, which this cgroup v1 host needs, is what
1.34 defaults to and what 1.35 to 1.37 still honour; DRA is GA and on in all of them; the
kubelet's fallback for a runtime without the RuntimeConfig call (Debian's containerd 1.6) stays
until 1.38. A release that changes one of them gets its difference there, as a function of
the cluster's KubernetesVersion (Cluster.version()) passed in: so far one, gang scheduling
(the PodGroup API and its feature gate from 1.37 on: components.gang_scheduling).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from localcluster.layout import CONTROLPLANE_SRC

ENV = "DT_KUBERNETES_VERSION"
DEFAULT = "1.34"
FORMAT = "MAJOR.MINOR, e.g. 1.36"
_VERSION_PATTERN = re.compile(r"^v?(\d+)\.(\d+)$")
_MODULE_PATTERN = re.compile(r"^v(\d+)\.(\d+)$")


@dataclass(frozen=True, order=True)
class KubernetesVersion:
    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def supported(source: Path = CONTROLPLANE_SRC) -> tuple[KubernetesVersion, ...]:
    """The releases with a wrapper module, oldest first."""
    found = []
    for module in source.glob("v*/go.mod"):
        match = _MODULE_PATTERN.match(module.parent.name)
        if match:
            found.append(KubernetesVersion(int(match.group(1)), int(match.group(2))))
    return tuple(sorted(found))


def parse(text: str, source: Path = CONTROLPLANE_SRC) -> KubernetesVersion:
    """"1.36" (or "v1.36") as a supported release; ValueError naming the valid ones otherwise."""
    match = _VERSION_PATTERN.match(text.strip())
    known = supported(source)
    version = KubernetesVersion(int(match.group(1)), int(match.group(2))) if match else None
    if version not in known:
        raise ValueError(f"no Kubernetes {text!r} here: use {FORMAT}, one of {', '.join(map(str, known))}")
    return version


def selected(environ: Mapping[str, str] = os.environ, source: Path = CONTROLPLANE_SRC) -> KubernetesVersion:
    """The release DT_KUBERNETES_VERSION names, else the default."""
    return parse(environ.get(ENV) or DEFAULT, source)


def pinned(version: KubernetesVersion, source: Path = CONTROLPLANE_SRC) -> str:
    """The patch release the wrapper module pins ("v1.36.3")."""
    for line in (module_dir(version, source) / "go.mod").read_text().splitlines():
        fields = line.split()
        if fields[:1] == ["k8s.io/kubernetes"] and fields[1].startswith("v"):
            return fields[1]
    raise ValueError(f"{module_dir(version, source)}/go.mod pins no k8s.io/kubernetes")


def module_dir(version: KubernetesVersion, source: Path = CONTROLPLANE_SRC) -> Path:
    return source / f"v{version}"


def version_file(run_root: Path) -> Path:
    """Where a run directory records the release its cluster was started with."""
    return run_root / "kubernetes-version"


def recorded(version_file: Path) -> KubernetesVersion | None:
    """The release a cluster was started with, as `record` wrote it; None if never started."""
    try:
        return parse(version_file.read_text())
    except (FileNotFoundError, ValueError):
        return None


def record(version_file: Path, version: KubernetesVersion) -> None:
    version_file.write_text(f"{version}\n")
