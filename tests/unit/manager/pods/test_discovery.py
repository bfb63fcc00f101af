"""The chief's hosts, from the manager (``manager/pods/discovery``) to the chief's discovery
script (``core/pods/podscripts/discover.py``): what is served, and the handover from the
pre-training process to the post-training one, during which the chief may be asking."""

import socket
import subprocess
import sys
import textwrap
import threading
import urllib.error
import urllib.request

import pytest

from distributetrain.manager.pods.discovery import DiscoveryServer, HostList, hosts_text
from harness.apiserver import HttpFake, Reply, Request
from harness.discoverscript import DiscoverScript

HOSTS = [("10.0.1.1", 1), ("10.0.2.0", 2)]
HOSTS_ANSWER = "10.0.1.1:1\n10.0.2.0:2\n"
# A manager process that serves the hosts, says when a request is being answered (a
# thread more), and ends when told (a line on its stdin), as pre-training ends right after
# it publishes them.
SERVING_PROCESS = textwrap.dedent("""
    import sys, threading
    from distributetrain.manager.pods.discovery import DiscoveryServer, HostList
    hosts = HostList()
    hosts.publish([("10.0.1.1", 1), ("10.0.2.0", 2)])
    with DiscoveryServer(hosts, port=0, address="127.0.0.1") as server:
        answering = threading.Event()
        start = threading.Thread.start

        def start_and_say(thread):  # the server starts a thread per request
            start(thread)
            answering.set()

        threading.Thread.start = start_and_say
        print(server.port, flush=True)
        answering.wait()
        print("answering", flush=True)
        sys.stdin.readline()
    print("closed", flush=True)
""")


def get(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


def test_the_server_answers_the_published_hosts_and_refuses_before_any():
    hosts = HostList()
    with DiscoveryServer(hosts, port=0, address="127.0.0.1") as server:
        url = f"http://127.0.0.1:{server.port}/hosts"
        with pytest.raises(urllib.error.HTTPError) as refused:
            get(url)
        assert refused.value.code == 503  # the chief's script keeps its last answer
        assert hosts.publish(HOSTS)
        assert get(url) == (200, HOSTS_ANSWER)
        assert not hosts.publish(HOSTS)
        with pytest.raises(urllib.error.HTTPError) as missing:
            get(f"http://127.0.0.1:{server.port}/other")
        assert missing.value.code == 404


def test_hosts_text_is_horovods_discovery_format():
    assert hosts_text([("a", 1), ("b", 4)]) == "a:1\nb:4\n"


def read_all(connection: socket.socket) -> bytes:
    received = b""
    while chunk := connection.recv(4096):
        received += chunk
    return received


def test_a_request_in_flight_when_the_manager_process_ends_is_answered_whole():
    """The chief asks as the pre-training process ends: its answer is written whole before
    the process is gone. (Its handler threads were daemons: the process's end cut the
    answer, and the chief's script died of it, exit code 1.)"""
    manager = subprocess.Popen([sys.executable, "-c", SERVING_PROCESS], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        port = int(manager.stdout.readline())
        with socket.create_connection(("127.0.0.1", port), timeout=10) as chief:
            chief.sendall(b"GET /hosts HTTP/1.1\r\nHost: manager\r\n")  # the request, all but its end
            assert manager.stdout.readline() == "answering\n"
            manager.stdin.write("end\n")
            manager.stdin.flush()
            with pytest.raises(subprocess.TimeoutExpired):
                manager.wait(timeout=0.3)  # the process waits for the answer in flight (REQUEST_TIMEOUT_S)
            chief.sendall(b"\r\n")
            answer = read_all(chief)
        assert manager.stdout.readline() == "closed\n"
        assert manager.wait(timeout=10) == 0
    finally:
        manager.kill()
        manager.wait()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 ") and body.decode() == HOSTS_ANSWER


def test_a_stalled_request_holds_the_managers_end_for_a_bounded_time():
    hosts = HostList()
    server = DiscoveryServer(hosts, port=0, address="127.0.0.1").__enter__()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as stalled:
        stalled.sendall(b"GET /hosts HTTP/1.1\r\n")
        ended = threading.Event()
        threading.Thread(target=lambda: (server.__exit__(None, None, None), ended.set()), daemon=True).start()
        assert ended.wait(timeout=10), "the server's end waited on a stalled client without limit"


@pytest.fixture
def cut_short_manager():
    """A manager answering the first request with a 200 cut short (headers that promise
    more than is sent, then the connection closed), the rest whole."""

    def answer(request: Request) -> Reply:
        return Reply(200, HOSTS_ANSWER.encode(), "text/plain", cut=len(server.received) == 1)

    with HttpFake(answer) as server:
        yield server


def test_the_chief_asks_again_after_an_answer_cut_short(tmp_path, cut_short_manager):
    done = DiscoverScript(tmp_path).run(f"http://127.0.0.1:{cut_short_manager.port}/hosts", "10.0.0.9")
    assert (done.returncode, done.stdout) == (0, "10.0.0.9:1\n" + HOSTS_ANSWER), done.stderr
    assert len(cut_short_manager.received) == 2


def test_an_elastic_chief_keeps_its_last_answer_when_one_is_cut_short(tmp_path, cut_short_manager):
    script = DiscoverScript(tmp_path)
    url = f"http://127.0.0.1:{cut_short_manager.port}/hosts"
    (tmp_path / "workers").write_text("10.0.3.3:4\n")  # the answer before
    done = script.run(url, "10.0.0.9", wait_s=None)
    assert (done.returncode, done.stdout) == (0, "10.0.0.9:1\n10.0.3.3:4\n"), done.stderr
    done = script.run(url, "10.0.0.9", wait_s=None)
    assert (done.returncode, done.stdout) == (0, "10.0.0.9:1\n" + HOSTS_ANSWER), done.stderr
