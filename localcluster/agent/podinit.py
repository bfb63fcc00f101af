"""Container init: build one container's namespaces, then exec its command.

The agent starts this file with `python -I -S podinit.py SPEC` in a new session
(so the container is its own process group), instead of doing the work between
fork and exec in the threaded agent, where that is unsafe. It joins the pod's
network namespace, unshares a mount and a UTS namespace, sets the hostname,
mounts a private /tmp and every volume, then execs the command in place, so
the container's main process keeps this pid.

It reports on a status socket (closed by the exec): first `ns` with a file
descriptor of its mount namespace attached, which the agent keeps open so it
can later find every process of the container by that namespace even after
the main process is gone; then `err <message>` if the command cannot start.

Standard library only and no package imports: it runs once per container
start, and a bare interpreter starts in a few milliseconds.
"""

import ctypes
import json
import os
import socket
import stat
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
START_ERROR_EXIT_CODE = 128

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source, target, fstype, flags, data=None):
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source or fstype} on {target}",
    )


def _ensure_mountpoint(target, is_dir):
    if os.path.lexists(target):
        return
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a"):
            pass


def build_namespaces(spec):
    netns = os.open(spec["netns"], os.O_RDONLY)
    _check(_libc.setns(netns, CLONE_NEWNET), f"setns {spec['netns']}")
    os.close(netns)
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    hostname = spec["hostname"].encode()
    _check(_libc.sethostname(hostname, len(hostname)), "sethostname")
    # Open every source before the private /tmp hides the ones that live under /tmp.
    sources = [os.open(mount["source"], os.O_PATH | os.O_CLOEXEC) for mount in spec["mounts"]]
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for mount, fd in zip(spec["mounts"], sources):
        target = mount["target"]
        _ensure_mountpoint(target, stat.S_ISDIR(os.stat(fd).st_mode))
        _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        if mount["readonly"]:
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        os.close(fd)


def main():
    with open(sys.argv[1]) as spec_file:
        spec = json.load(spec_file)
    status = socket.socket(fileno=spec["status_fd"])
    status.set_inheritable(False)
    try:
        build_namespaces(spec)
        workdir = spec["workdir"]
        os.makedirs(workdir, exist_ok=True)
        os.chdir(workdir)
    except OSError as error:
        status.sendall(f"err failed to create the container: {error}".encode())
        os._exit(START_ERROR_EXIT_CODE)
    mount_ns = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    socket.send_fds(status, [b"ns"], [mount_ns])
    os.close(mount_ns)
    argv = spec["argv"]
    try:
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as error:
        reason = "executable file not found in $PATH" if isinstance(error, FileNotFoundError) else error.strerror
        status.sendall(f"err exec: {argv[0]!r}: {reason}".encode())
        os._exit(START_ERROR_EXIT_CODE)


if __name__ == "__main__":
    main()
