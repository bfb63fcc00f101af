"""Detached processes with pid files, and the sweep for strays.

Cluster processes outlive the command that started them (`python -m localcluster
up` returns), so each runs in its own session with its log and pid file under
the run directory. A pid file is trusted only while the process it names still
has the recorded command line, so a recycled pid is never signalled.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path

log = logging.getLogger(__name__)

STOP_POLL_INTERVAL_S = 0.05


PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def environment_without_proxy() -> dict[str, str]:
    """The host's environment without its HTTP proxy: the nodes and the image cache reach the
    registry and the apiserver on the cluster's own network, never through a proxy meant
    for the internet."""
    return {key: value for key, value in os.environ.items() if key.lower() not in PROXY_VARIABLES}


def prepend_path(entry: str, path: str | None) -> str:
    """A search path (PATH, PYTHONPATH) with `entry` first."""
    return f"{entry}:{path}" if path else entry


def start_detached(
    argv: list[str],
    pid_file: Path,
    log_file: Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    program: str | None = None,
) -> int:
    """Start `argv` in a new session, output appended to `log_file`; returns the pid.

    `program` is what the process runs once started, when `argv[0]` execs it (nsenter).
    """
    with open(log_file, "ab") as output:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    pid_file.write_text(f"{process.pid}\n{program or argv[0]}\n")
    log.info("started %s (pid %d, log %s)", Path(argv[0]).name, process.pid, log_file)
    return process.pid


def read_pid(pid_file: Path) -> int | None:
    """The pid in `pid_file` if that process still runs the recorded program, else None."""
    try:
        pid_text, program = pid_file.read_text().splitlines()[:2]
        pid = int(pid_text)
    except (FileNotFoundError, ValueError):
        return None
    # An empty command line is a process in the middle of execve: it is ours.
    return pid if alive(pid) and _program(pid) in (program, "") else None


def identity(pid: int) -> str | None:
    """`pid` and its start time ("1234@5678", in clock ticks since boot), which a recycled pid
    does not share; None if no such process runs."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            started = stat.read().rsplit(")", 1)[1].split()[19]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return f"{pid}@{started}"


def identity_alive(recorded: str) -> bool:
    """Whether the process `identity` recorded still runs (not one that got its pid since)."""
    pid = int(recorded.split("@", 1)[0])
    return identity(pid) == recorded and alive(pid)


def alive(pid: int) -> bool:
    """Whether `pid` runs. A zombie waiting to be reaped does not count, unless other
    threads of it still run: a killed multi-threaded process (the apiserver) shows its
    leader as a zombie at once, while its other threads still exit and hold its files,
    a listening port among them, until the last one has."""
    _reap(pid)
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":" in line)
        state, threads = fields["State"].split()[0], int(fields["Threads"])
    except (FileNotFoundError, ProcessLookupError, KeyError, IndexError, ValueError):
        return False
    return state not in ("Z", "X") or threads > 1


def stop(pid: int, name: str, timeout_s: float) -> None:
    """SIGTERM `pid`, then SIGKILL its whole session if it outlives `timeout_s`."""
    if not alive(pid):
        return
    log.info("stopping %s (pid %d)", name, pid)
    terminate(pid)
    if wait_exit(pid, timeout_s):
        return
    log.warning("%s (pid %d) ignored SIGTERM for %.0f s; killing its session", name, pid, timeout_s)
    kill_session(pid)
    wait_exit(pid, timeout_s)


def terminate(pid: int) -> None:
    """SIGTERM `pid` without waiting."""
    _signal(pid, signal.SIGTERM)


def kill(pid: int, name: str, timeout_s: float) -> None:
    """SIGKILL `pid` and wait until it is gone."""
    log.info("killing %s (pid %d)", name, pid)
    _signal(pid, signal.SIGKILL)
    wait_exit(pid, timeout_s)


def kill_session(pid: int) -> None:
    """SIGKILL every process in the session led by `pid`."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        _signal(pid, signal.SIGKILL)


def wait_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(STOP_POLL_INTERVAL_S)
    return True


def pids_under(root: Path) -> list[int]:
    """Processes whose working directory or any argument lies under `root`.

    This process and its ancestors are excluded: a shell may well sit in `root`.
    """
    prefix = f"{root}/"
    spared = _self_and_ancestors()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in spared:
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        texts = [cwd] + [arg.decode(errors="replace") for arg in args]
        if any(text == str(root) or prefix in text for text in texts):
            found.append(int(entry.name))
    return sorted(found)


def _self_and_ancestors() -> set[int]:
    pids = set()
    pid = os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as stat:
                pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, IndexError, ValueError):
            break
    return pids


def _program(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    """Collect `pid`'s exit status if it is our child, so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
