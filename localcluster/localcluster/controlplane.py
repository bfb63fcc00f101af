"""The control plane's processes on the host: etcd, the apiserver, the controller-manager,
the scheduler, the registry and its pull proxy, started and stopped from their pid files.

Everything lives in the run directory (`RunLayout`), so any process (the CLI, a test
session) starts, stops or restarts a component the same way; `Cluster` orders them.
"""

from __future__ import annotations

import logging
import os

from localcluster import certs, components, kubeconfig, processes, registry, versions
from localcluster.components import Binaries
from localcluster.errors import ClusterError
from localcluster.layout import PROJECT_ROOT, RunLayout, venv_dir
from localcluster.probe import ApiProbe, wait_until

log = logging.getLogger(__name__)

APISERVER_READY_TIMEOUT_S = 60.0
DEFAULT_SERVICE_ACCOUNT_TIMEOUT_S = 30.0
COMPONENT_STOP_TIMEOUT_S = 15.0
REGISTRY_READY_TIMEOUT_S = 30.0
DEFAULT_SERVICE_ACCOUNT_PATH = "/api/v1/namespaces/default/serviceaccounts/default"

COMPONENT_IDENTITIES = {
    components.CONTROLLER_MANAGER: certs.CONTROLLER_MANAGER,
    components.SCHEDULER: certs.SCHEDULER,
}


def prepare(layout: RunLayout) -> certs.Pki:
    """PKI, kubeconfigs and the registry's config; all idempotent. Returns the PKI."""
    pki = certs.ensure_pki(layout.pki)
    # Every node's kube-proxy authenticates with this one.
    certs.ensure_client(pki, certs.KUBE_PROXY)
    certs.ensure_client(pki, certs.FRONT_PROXY_CLIENT)
    if not layout.kubeconfig.exists():
        kubeconfig.write(layout.kubeconfig, kubeconfig.render(pki, certs.ADMIN))
    for component, identity in COMPONENT_IDENTITIES.items():
        path = layout.component_kubeconfig(component)
        if not path.exists():
            kubeconfig.write(path, kubeconfig.render(pki, identity))
    registry.write_config(layout)
    registry.storage_dir().mkdir(parents=True, exist_ok=True)
    return pki


def any_running(layout: RunLayout) -> bool:
    """Whether any component of this run directory has a pid file of a live process."""
    return any(processes.read_pid(layout.pid_file(name)) for name in components.COMPONENTS)


def running_version(layout: RunLayout) -> versions.KubernetesVersion:
    """The release this run directory's control plane runs (one from before releases were
    recorded runs the default)."""
    return versions.recorded(versions.version_file(layout.root)) or versions.parse(versions.DEFAULT)


def choose_version(layout: RunLayout, wanted: versions.KubernetesVersion) -> None:
    """Run `wanted`; a control plane already up with another release is an error."""
    running = running_version(layout)
    if running != wanted and any_running(layout):
        raise ClusterError(f"the cluster in {layout.root} runs Kubernetes {running}, not {wanted}: "
                           "take it down first (python -m localcluster down)")
    versions.record(versions.version_file(layout.root), wanted)


def start_all(layout: RunLayout, pki: certs.Pki, binaries: Binaries, probe: ApiProbe) -> None:
    """Start whichever components are not running, as early as each can start.

    etcd and the apiserver start together (the apiserver retries etcd); the
    controller-manager gives up if the apiserver is not healthy within 10 s,
    so it and the scheduler start once the apiserver is ready.
    """
    _ensure_running(layout, pki, binaries, components.ETCD, components.APISERVER)
    wait_until(probe.ready, APISERVER_READY_TIMEOUT_S, "the apiserver's /readyz")
    _ensure_running(layout, pki, binaries, components.CONTROLLER_MANAGER, components.SCHEDULER,
                    components.REGISTRY, components.PULL_PROXY)
    wait_until(
        lambda: probe.exists(DEFAULT_SERVICE_ACCOUNT_PATH),
        DEFAULT_SERVICE_ACCOUNT_TIMEOUT_S,
        "the default ServiceAccount (controller-manager)",
    )
    wait_until(registry.pullable, REGISTRY_READY_TIMEOUT_S, "the registry, through the nodes' pull proxy")


def commands(layout: RunLayout, pki: certs.Pki, binaries: Binaries) -> dict[str, list[str]]:
    """Every component's command line: Kubernetes' own, the registry's and its pull proxy's."""
    return {
        **components.commands(layout, pki, binaries, running_version(layout)),
        components.REGISTRY: registry.command(binaries.registry, layout.registry_config),
        components.PULL_PROXY: registry.pull_proxy_command(venv_dir() / "bin" / "python", layout.pull_delays_file),
    }


def start(layout: RunLayout, pki: certs.Pki, binaries: Binaries, name: str) -> None:
    argv = commands(layout, pki, binaries)[name]
    # The pull proxy is this package's own: python -m localcluster.slowpulls.
    env = {**os.environ, "PYTHONPATH": processes.prepend_path(str(PROJECT_ROOT), os.environ.get("PYTHONPATH"))}
    processes.start_detached(argv, layout.pid_file(name), layout.log_file(name), cwd=layout.root, env=env)


def stop(layout: RunLayout, name: str, graceful: bool = True) -> None:
    """Stop the process of `name` (SIGTERM, or SIGKILL unless `graceful`) and forget its pid."""
    pid_file = layout.pid_file(name)
    pid = processes.read_pid(pid_file)
    if pid is not None and graceful:
        processes.stop(pid, name, COMPONENT_STOP_TIMEOUT_S)
    elif pid is not None:
        processes.kill(pid, name, COMPONENT_STOP_TIMEOUT_S)
    pid_file.unlink(missing_ok=True)


def _ensure_running(layout: RunLayout, pki: certs.Pki, binaries: Binaries, *names: str) -> None:
    for name in names:
        if processes.read_pid(layout.pid_file(name)) is None:
            start(layout, pki, binaries, name)
