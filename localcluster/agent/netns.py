"""Network namespace primitives: `ip` in batches, and setns(2) for one thread.

Python 3.11 has no os.setns, so entering a namespace goes through libc. Only the
calling thread changes namespace, which is what the kubelet API server needs:
a listening socket stays in the namespace it was created in, so a thread can
step into a node's namespace, create the socket, and step back.
"""

from __future__ import annotations

import ctypes
import logging
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = "/run/netns"
IP_TIMEOUT_S = 30

_libc = ctypes.CDLL(None, use_errno=True)


class NetworkError(Exception):
    pass


def ip_batch(commands: list[str], netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run `ip` commands in one process (`ip -batch`), optionally inside netns."""
    argv = ["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"]
    if not check:
        argv.insert(1, "-force")
    result = subprocess.run(
        argv, input="\n".join(commands) + "\n", capture_output=True, text=True, timeout=IP_TIMEOUT_S
    )
    if check and result.returncode != 0:
        raise NetworkError(f"ip {'-n ' + netns + ' ' if netns else ''}failed: {result.stderr.strip()} (commands: {commands})")
    return result


def netns_names() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_RUN_DIR))
    except FileNotFoundError:
        return []


def link_names() -> list[str]:
    return sorted(os.listdir("/sys/class/net"))


def setns(fd: int, nstype: int = CLONE_NEWNET) -> None:
    if _libc.setns(fd, nstype) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


@contextmanager
def entered(netns: str) -> Iterator[None]:
    """Move the calling thread into netns for the duration of the block."""
    original = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(f"{NETNS_RUN_DIR}/{netns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(target)
        try:
            yield
        finally:
            setns(original)
    finally:
        os.close(target)
        os.close(original)
