"""Containers through the OCI runtime: podman with runc, from the pod's image.

Each container is created (`podman create`: image, command line, user, environment,
mounts, the pod's network namespace and hostname), initialised (`podman init`: runc
creates the process, so an executable that is not there fails here, with runc's
message, as the kubelet's StartError) and then started attached (`podman start
--attach`), whose process the supervisor watches: its output is the container's,
and its exit code is the container's (128+n after signal n). Every container has its
own PID namespace, so when its main process ends every process of it ends, and a
main process that ignores SIGTERM (PID 1 without a handler) runs on until SIGKILL,
as on a real node.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from localcluster.agent.containerlogs import LogWriter
from localcluster.agent.supervisor import ExitStatus, Supervisor
from localcluster.agent.volumes import Mount
from localcluster.podman import PODMAN, STATE_DIR_LABEL, PodmanError, labelled_containers, podman, podman_env

log = logging.getLogger(__name__)

# Labels on every container: the pod it belongs to (the agent's state directory is
# STATE_DIR_LABEL, shared with `localcluster down`).
POD_UID_LABEL = "io.kubernetes.pod.uid"
# `podman kill` fails on a container that is created but not yet running (the instant
# between init and start): retry for this long before giving up on the signal.
SIGNAL_RETRY_S = 2.0
SIGNAL_RETRY_INTERVAL_S = 0.2


class StartError(Exception):
    """The OCI runtime could not start the process (the kubelet's StartError, exit code 128)."""


@dataclass(frozen=True)
class LaunchSpec:
    """Everything podman needs to create one container run."""

    name: str  # unique per run: the podman container name
    image_id: str
    netns_path: str
    hostname: str
    mounts: tuple[Mount, ...]
    argv: tuple[str, ...]
    env: Mapping[str, str]  # the kubelet's variables; the image's ENV is underneath
    user: str = ""  # uid[:gid]; empty: the image's USER
    workdir: str = ""  # empty: the image's WORKDIR
    security: tuple[str, ...] = ()  # podman options from the securityContext
    labels: Mapping[str, str] = field(default_factory=dict)


def security_options(pod: dict, container: dict) -> list[str]:
    """podman options for the securityContext fields this runtime honours."""
    pod_context = pod["spec"].get("securityContext") or {}
    context = container.get("securityContext") or {}
    options: list[str] = []
    if context.get("privileged"):
        options.append("--privileged")
    capabilities = context.get("capabilities") or {}
    options.extend(f"--cap-add={name}" for name in capabilities.get("add") or [])
    options.extend(f"--cap-drop={name}" for name in capabilities.get("drop") or [])
    if context.get("readOnlyRootFilesystem"):
        options.append("--read-only")
    if context.get("allowPrivilegeEscalation") is False:
        options.append("--security-opt=no-new-privileges")
    groups = list(pod_context.get("supplementalGroups") or [])
    if pod_context.get("fsGroup") is not None:
        groups.append(pod_context["fsGroup"])
    options.extend(f"--group-add={group}" for group in groups)
    # The kubelet's default is Unconfined unless a profile is asked for.
    seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
    if seccomp != "RuntimeDefault":
        options.append("--security-opt=seccomp=unconfined")
    return options


def create_arguments(spec: LaunchSpec) -> list[str]:
    """The `podman create` command line of one run (pure, for tests)."""
    args = [
        "create", "--name", spec.name, "--pull=never", "--log-driver=none",
        f"--network=ns:{spec.netns_path}", f"--hostname={spec.hostname}",
        # /etc/hosts is the kubelet's file, mounted like any volume.
        "--no-hosts",
        f"--entrypoint={json.dumps(list(spec.argv))}",
    ]
    args.extend(f"--label={key}={value}" for key, value in spec.labels.items())
    args.extend(f"--env={name}={value}" for name, value in spec.env.items())
    if spec.user:
        args.append(f"--user={spec.user}")
    if spec.workdir:
        args.append(f"--workdir={spec.workdir}")
    for mount in spec.mounts:
        option = f"--mount=type=bind,source={mount.source},destination={mount.target}"
        args.append(option + (",ro=true" if mount.readonly else ""))
    args.extend(spec.security)
    args.append(spec.image_id)
    return args


class ContainerProcess:
    """A started run: the attached `podman start` process the supervisor watches, and its container."""

    def __init__(self, name: str, popen: subprocess.Popen, stop_signal: str):
        self.name = name
        self.pid = popen.pid
        self.started_at = datetime.datetime.now(datetime.timezone.utc)
        self._popen = popen
        self._stop_signal = stop_signal or "SIGTERM"
        self._reaped = False

    @property
    def alive(self) -> bool:
        return not self._reaped

    def reap(self) -> int:
        """Wait for the attached process (it has exited) and return the container's exit code."""
        returncode = self._popen.wait()
        self._reaped = True
        return returncode

    def terminate(self) -> None:
        """The image's stop signal (SIGTERM by default) to the container's main process."""
        self._signal(self._stop_signal)

    def kill(self) -> None:
        """SIGKILL the container: its PID namespace, so every process of it, goes."""
        self._signal("SIGKILL")

    def remove(self) -> None:
        """Remove the container (killing what still runs); idempotent."""
        podman(["rm", "--force", "--time", "0", self.name], check=False)
        if not self._reaped:
            try:
                self._popen.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass

    def exec(self, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess:
        """Run a command inside the container (exec probes), with the container's user and env."""
        return subprocess.run([PODMAN, "exec", self.name, *argv], env=podman_env(), stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout_s)

    def _signal(self, name: str) -> None:
        give_up_at = time.monotonic() + SIGNAL_RETRY_S
        while not self._reaped:
            result = podman(["kill", f"--signal={name}", self.name], check=False)
            if result.returncode == 0 or time.monotonic() >= give_up_at:
                if result.returncode != 0 and not self._reaped:
                    log.warning("could not send %s to %s: %s", name, self.name, result.stderr.strip())
                return
            time.sleep(SIGNAL_RETRY_INTERVAL_S)


def start_container(
    spec: LaunchSpec, stop_signal: str, log_writer: LogWriter, supervisor: Supervisor,
    on_exit: Callable[[ExitStatus], None],
) -> ContainerProcess:
    """Create, initialise and start one run; StartError when runc cannot start its process.

    A create failure (a bad mount, an option podman refuses) raises PodmanError. Either
    way nothing is left behind.
    """
    podman(create_arguments(spec))
    initialised = podman(["init", spec.name], check=False)
    if initialised.returncode != 0:
        podman(["rm", "--force", "--time", "0", spec.name], check=False)
        raise StartError(_start_error_message(initialised.stderr))
    stdout_read, stdout_write = os.pipe2(os.O_CLOEXEC)
    stderr_read, stderr_write = os.pipe2(os.O_CLOEXEC)
    try:
        popen = subprocess.Popen(
            [PODMAN, "start", "--attach", spec.name], env=podman_env(), stdin=subprocess.DEVNULL,
            stdout=stdout_write, stderr=stderr_write, start_new_session=True,
        )
    except OSError:
        os.close(stdout_read)
        os.close(stderr_read)
        podman(["rm", "--force", "--time", "0", spec.name], check=False)
        raise
    finally:
        os.close(stdout_write)
        os.close(stderr_write)
    started = ContainerProcess(spec.name, popen, stop_signal)
    supervisor.watch(popen.pid, started.reap, stdout_read, stderr_read, log_writer, on_exit)
    return started


def _start_error_message(stderr: str) -> str:
    """runc's reason, as the kubelet words a StartError (podman's wrapping removed)."""
    lines = [line.removeprefix("Error: ") for line in stderr.strip().splitlines() if line.strip()]
    reason = lines[-1] if lines else "the OCI runtime could not start the container"
    reason = reason.removeprefix("runc: ").split(": OCI runtime attempted")[0]
    return f"failed to create containerd task: failed to create shim task: OCI runtime create failed: {reason}: unknown"


def remove_agent_containers(state_dir: str) -> int:
    """Remove every container an agent with this state directory left (after a crash); how many."""
    try:
        leftover = [cid for cid, value in labelled_containers(STATE_DIR_LABEL).items() if value == state_dir]
        if leftover:
            podman(["rm", "--force", "--time", "0", *leftover], check=False)
        return len(leftover)
    except PodmanError as error:
        log.warning("could not remove leftover containers: %s", error)
        return 0
