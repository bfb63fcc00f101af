"""Starting and killing container processes (the agent's stand-in for a container runtime).

A container is a process tree started through podinit.py in the pod's network
namespace, with its own mount and UTS namespaces, in a session of its own.
The agent keeps a handle on the container's mount namespace, which every
process of the container shares whatever sessions or process groups it
creates (sshd's children do), so killing a container kills all of it, as
tearing down a PID namespace does on a real node.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localcluster.agent.containerlogs import LogWriter
from localcluster.agent.supervisor import ExitStatus, Supervisor
from localcluster.agent.volumes import Mount

log = logging.getLogger(__name__)

PODINIT = Path(__file__).with_name("podinit.py")
START_TIMEOUT_S = 60
STATUS_MESSAGE_BYTES = 4096
PODINIT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class LaunchSpec:
    """Everything podinit needs to become the container's main process."""

    netns_path: str
    hostname: str
    mounts: tuple[Mount, ...]
    workdir: str
    argv: tuple[str, ...]
    env: dict[str, str]


class ContainerProcess:
    """A started container: its main process, and a handle on its mount namespace.

    The main process's pid is also its process group id; it cannot be reused
    before the process is reaped, so the group is only signalled under the lock
    that reaping takes. The mount namespace stays pinned by an open descriptor,
    so its inode identifies the container's processes even after the main
    process is gone.
    """

    def __init__(self, popen: subprocess.Popen, mount_ns_fd: int | None, start_error: str | None):
        self.pid = popen.pid
        self.started_at = datetime.datetime.now(datetime.timezone.utc)
        # Set when the command could not be started (the process exits 128).
        self.start_error = start_error
        self._popen = popen
        self._mount_ns_fd = mount_ns_fd
        self._lock = threading.Lock()
        self._reaped = False

    @property
    def alive(self) -> bool:
        return not self._reaped

    def reap(self) -> int:
        """Wait for the main process (it has exited) and return its returncode."""
        with self._lock:
            returncode = self._popen.wait()
            self._reaped = True
            return returncode

    def terminate(self) -> None:
        """SIGTERM the container's process group."""
        self._signal_group(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL every process of the container, then let go of its namespace."""
        self._signal_group(signal.SIGKILL)
        with self._lock:
            if self._mount_ns_fd is not None:
                kill_mount_namespace(os.fstat(self._mount_ns_fd).st_ino)
                os.close(self._mount_ns_fd)
                self._mount_ns_fd = None

    def _signal_group(self, signum: int) -> None:
        with self._lock:
            if not self._reaped:
                try:
                    os.killpg(self.pid, signum)
                except ProcessLookupError:
                    pass


def kill_mount_namespace(mnt_ns_inode: int) -> int:
    """SIGKILL every process in a mount namespace, whatever sessions or groups they moved to."""
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/mnt").st_ino == mnt_ns_inode:
                os.kill(int(entry), signal.SIGKILL)
                killed += 1
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return killed


def start_container(
    spec: LaunchSpec, spec_path: Path, log_writer: LogWriter, supervisor: Supervisor,
    on_exit: Callable[[ExitStatus], None],
) -> ContainerProcess:
    """Start the container and hand its pipes and exit to the supervisor."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stdout_read, stdout_write = os.pipe2(os.O_CLOEXEC)
    stderr_read, stderr_write = os.pipe2(os.O_CLOEXEC)
    document = {
        "netns": spec.netns_path,
        "hostname": spec.hostname,
        "mounts": [{"source": m.source, "target": m.target, "readonly": m.readonly} for m in spec.mounts],
        "workdir": spec.workdir,
        "argv": list(spec.argv),
        "env": spec.env,
        "status_fd": child.fileno(),
    }
    descriptor = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(descriptor, "w") as spec_file:
        json.dump(document, spec_file)
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(PODINIT), str(spec_path)],
            stdin=subprocess.DEVNULL,
            stdout=stdout_write,
            stderr=stderr_write,
            pass_fds=(child.fileno(),),
            start_new_session=True,
            env={"PATH": PODINIT_PATH},
        )
    finally:
        child.close()
        os.close(stdout_write)
        os.close(stderr_write)
    mount_ns_fd, start_error = _read_start_status(parent)
    parent.close()
    spec_path.unlink(missing_ok=True)
    started = ContainerProcess(process, mount_ns_fd, start_error)
    supervisor.watch(process.pid, started.reap, stdout_read, stderr_read, log_writer, on_exit)
    return started


def _read_start_status(status: socket.socket) -> tuple[int | None, str | None]:
    """(mount namespace fd, start error) from podinit; end of stream means the exec happened."""
    status.settimeout(START_TIMEOUT_S)
    mount_ns_fd = None
    try:
        while True:
            message, fds, _flags, _address = socket.recv_fds(status, STATUS_MESSAGE_BYTES, 1)
            for fd in fds:
                mount_ns_fd = fd
            if not message:
                return mount_ns_fd, None
            if message.startswith(b"err "):
                return mount_ns_fd, message[4:].decode(errors="replace")
    except TimeoutError:
        return mount_ns_fd, f"container init did not finish within {START_TIMEOUT_S}s"
