"""Where one local cluster keeps its files.

Everything a cluster creates lives under one run directory ($DT_RUN), so that
`down` can find and remove what is left even after a crash, and so that a
second run directory never touches the first one's files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_RUN_DIR = "/tmp/distributetrain-cluster"
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "distributetrain"

# The localcluster project: this package, the Go modules it builds and their scripts.
PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONTROLPLANE_SRC = PROJECT_ROOT / "controlplane"


@dataclass(frozen=True)
class RunLayout:
    """Paths of one cluster's run directory."""

    root: Path

    @classmethod
    def from_env(cls) -> RunLayout:
        return cls(Path(os.environ.get("DT_RUN", DEFAULT_RUN_DIR)).resolve())

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def api_state(self) -> tuple[Path, ...]:
        """What brings the API's objects back on the next `up`: etcd's data. `down` removes
        it unless asked to keep it (`down --keep-state`), so a new run starts with none of
        the last run's pods; the PKI and kubeconfigs stay, they hold no objects."""
        return (self.etcd_data,)

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (system:masters), for users and tests."""
        return self.root / "kubeconfig"

    @property
    def node_groups_file(self) -> Path:
        """Node groups and the node indices they hold (see nodegroups.py)."""
        return self.root / "nodegroups.json"

    @property
    def pull_delays_file(self) -> Path:
        """Slow image pulls, for the whole cluster and per node (localcluster/slowpulls.py)."""
        return self.root / "image-pull-delays.json"

    @property
    def registry_config(self) -> Path:
        return self.root / "registry.json"

    @property
    def nodes(self) -> Path:
        """Real nodes' run-time files, `n<index>` each (localcluster/node/)."""
        return self.root / "nodes"

    def node_dir(self, index: int) -> Path:
        return self.nodes / f"n{index}"

    @property
    def karpenter_instances(self) -> Path:
        """The nodes Karpenter's NodeClaims run, one JSON record each (localcluster/nodeclaims.py)."""
        return self.root / "karpenter-instances"

    @property
    def host_state_file(self) -> Path:
        """The host's settings before the first node changed them (node/hostchanges.py)."""
        return self.root / "host-before-nodes.json"

    @property
    def lock_file(self) -> Path:
        """Serialises up/down/add_nodes between processes."""
        return self.root / "lock"

    def pid_file(self, component: str) -> Path:
        return self.pids / f"{component}.pid"

    def log_file(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def component_kubeconfig(self, component: str) -> Path:
        return self.pki / f"{component}.kubeconfig"

    def make_dirs(self) -> None:
        for directory in (self.root, self.pki, self.logs, self.pids):
            directory.mkdir(parents=True, exist_ok=True)
        self.pki.chmod(0o700)


def cache_dir() -> Path:
    return Path(os.environ.get("DT_CACHE", DEFAULT_CACHE_DIR))


def venv_dir() -> Path:
    return Path(os.environ.get("DT_VENV", cache_dir() / "venv"))
