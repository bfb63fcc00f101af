"""localcluster.processes: a process counts as gone only once nothing of it runs."""

import socket
import subprocess
import sys

from localcluster import processes

# The main thread (the thread-group leader) exits alone while another thread still holds a
# listening port, as a SIGKILLed apiserver's leader does while its other threads still exit.
# That thread runs until its stdin is closed.
LEADER_EXITS_FIRST = """\
import ctypes, socket, sys, threading
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
print(server.getsockname()[1], flush=True)
threading.Thread(target=sys.stdin.read).start()
ctypes.CDLL(None).pthread_exit(None)
"""


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_a_process_whose_leader_exited_while_its_threads_run_is_alive_until_they_end():
    process = subprocess.Popen([sys.executable, "-c", LEADER_EXITS_FIRST], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        port = int(process.stdout.readline())
        assert processes.wait_exit(process.pid, 0.3) is False  # the leader is a zombie by now
        assert not port_is_free(port)
        process.stdin.close()  # the other thread ends
        assert processes.wait_exit(process.pid, 30)
        assert port_is_free(port)  # what a restarted apiserver needs: its port
    finally:
        process.kill()
        process.wait()
        process.stdout.close()
        if not process.stdin.closed:
            process.stdin.close()


def test_a_reaped_or_unknown_process_is_not_alive():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert not processes.alive(process.pid)
