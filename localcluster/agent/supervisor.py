"""One thread that copies every container's output to its log and notices every exit.

With 64 pods on 2 cores, a thread (or process) per stream would be waste: this
loop waits on all stdout/stderr pipes and on a pidfd per container process
with a single epoll, writes output to the CRI log files, and reaps exited
processes, reporting their exit status to whoever started them.
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from localcluster.agent.containerlogs import LogWriter

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class ExitStatus:
    """How a container's main process ended, in the kubelet's terms."""

    exit_code: int
    signal: int | None

    @classmethod
    def from_returncode(cls, returncode: int) -> ExitStatus:
        if returncode < 0:
            return cls(exit_code=128 - returncode, signal=-returncode)
        return cls(exit_code=returncode, signal=None)


@dataclass
class _Watched:
    pid: int
    reap: Callable[[], int]
    log: LogWriter
    on_exit: Callable[[ExitStatus], None]
    open_streams: set[str] = field(default_factory=lambda: {"stdout", "stderr"})


class Supervisor(threading.Thread):
    """Owns the output pipes and pidfds of all running containers."""

    def __init__(self):
        super().__init__(name="supervisor", daemon=True)
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._pending: list[tuple[_Watched, int, int]] = []
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)

    def watch(
        self, pid: int, reap: Callable[[], int], stdout: int, stderr: int, log_writer: LogWriter,
        on_exit: Callable[[ExitStatus], None],
    ) -> None:
        """Take over the read ends of a process's pipes; when it ends, reap() it here and call on_exit."""
        with self._lock:
            self._pending.append((_Watched(pid, reap, log_writer, on_exit), stdout, stderr))
        os.write(self._wake_write, b"x")

    def run(self) -> None:
        while True:
            for key, _ in self._selector.select():
                if key.data is None:
                    self._register_pending()
                    continue
                kind, watched = key.data
                try:
                    if kind == "exit":
                        self._reap(key.fd, watched)
                    else:
                        self._pump(key.fd, kind, watched)
                except Exception:
                    log.exception("supervisor: failed handling %s of pid %d", kind, watched.pid)

    def _register_pending(self) -> None:
        try:
            while os.read(self._wake_read, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            pending, self._pending = self._pending, []
        for watched, stdout, stderr in pending:
            os.set_blocking(stdout, False)
            os.set_blocking(stderr, False)
            self._selector.register(stdout, selectors.EVENT_READ, ("stdout", watched))
            self._selector.register(stderr, selectors.EVENT_READ, ("stderr", watched))
            pidfd = os.pidfd_open(watched.pid)
            self._selector.register(pidfd, selectors.EVENT_READ, ("exit", watched))

    def _pump(self, fd: int, stream: str, watched: _Watched) -> None:
        try:
            data = os.read(fd, READ_CHUNK_BYTES)
        except BlockingIOError:
            return
        if data:
            watched.log.write(stream, data)
            return
        self._selector.unregister(fd)
        os.close(fd)
        watched.log.end(stream)
        watched.open_streams.discard(stream)
        if not watched.open_streams:
            watched.log.close()

    def _reap(self, pidfd: int, watched: _Watched) -> None:
        self._selector.unregister(pidfd)
        os.close(pidfd)
        returncode = watched.reap()
        watched.on_exit(ExitStatus.from_returncode(returncode))
