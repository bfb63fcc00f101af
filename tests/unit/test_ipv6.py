"""IPv6 pod addresses: the hosts URL in brackets, the manager listening on IPv6 too, and
the chief's hostfile and ssh names free of the colons Horovod splits on."""

import shutil
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest

from distributetrain.core.pods import manifests
from distributetrain.manager.pods.discovery import DiscoveryServer, HostList, hosts_text, hosts_url
from harness.discoverscript import DiscoverScript

CHIEF_V6 = "2001:db8::1"
MANAGER_V6 = "fd00::a"
WORKER_V6 = "fd00::b"


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not ipv6_loopback(), reason="this machine has no IPv6 loopback")


@pytest.mark.parametrize("address, url", [
    (MANAGER_V6, "http://[fd00::a]:8470/hosts"),
    (CHIEF_V6, "http://[2001:db8::1]:8470/hosts"),
    ("10.233.1.7", "http://10.233.1.7:8470/hosts"),
])
def test_the_hosts_url_brackets_an_ipv6_address(address, url):
    assert hosts_url(address) == url
    parts = urllib.parse.urlsplit(url)
    assert (parts.hostname, parts.port, parts.path) == (address, 8470, "/hosts")


def test_the_hosts_text_keeps_the_slots_after_the_last_colon():
    text = hosts_text([(WORKER_V6, 2), ("10.0.0.2", 1)])
    assert [line.rsplit(":", 1) for line in text.splitlines()] == [[WORKER_V6, "2"], ["10.0.0.2", "1"]]


@needs_ipv6
@pytest.mark.parametrize("client_host", ["127.0.0.1", "[::1]"])
def test_the_manager_answers_on_ipv6_and_ipv4_alike(client_host):
    hosts = HostList()
    hosts.publish([(WORKER_V6, 2)])
    with DiscoveryServer(hosts, port=0) as server:
        with urllib.request.urlopen(f"http://{client_host}:{server.port}/hosts", timeout=5) as response:
            assert response.read().decode() == "fd00::b:2\n"


@pytest.fixture
def discover(tmp_path):
    """The chief's discovery script: (its hosts, its ssh names) from a manager's answer."""
    script = DiscoverScript(tmp_path)

    def run(url, chief_address, slots="1"):
        done = script.run(url, chief_address, slots)
        assert done.returncode == 0, done.stderr
        return done.stdout, script.ssh_hosts.read_text()

    return run


def horovod_hosts(hostfile_lines: str) -> list[tuple[str, int]]:
    """Horovod 0.28.1's parse (runner/common/util/hosts.py, HostInfo.from_string)."""
    parsed = []
    for line in hostfile_lines.splitlines():
        hostname, slots = line.strip().split(":")
        parsed.append((hostname, int(slots)))
    return parsed


@needs_ipv6
def test_the_chief_names_ipv6_hosts_for_horovod_and_ssh(discover):
    hosts = HostList()
    hosts.publish([(WORKER_V6, 2), ("fd00::c", 1)])
    with DiscoveryServer(hosts, port=0, address="::1") as server:
        lines, ssh_hosts = discover(f"http://[::1]:{server.port}/hosts", CHIEF_V6, "3")
    # The chief is `localhost`: Horovod knows its own host by IPv4 addresses alone.
    assert horovod_hosts(lines) == [("localhost", 3), ("ipv6-fd00--b", 2), ("ipv6-fd00--c", 1)]
    assert ssh_hosts == ("Host ipv6-fd00--b\n  HostName fd00::b\n"
                         "Host ipv6-fd00--c\n  HostName fd00::c\n")


@needs_ipv6
def test_ipv4_hosts_keep_their_addresses(discover):
    hosts = HostList()
    hosts.publish([("10.233.1.5", 2)])
    with DiscoveryServer(hosts, port=0, address="::1") as server:
        lines, ssh_hosts = discover(f"http://[::1]:{server.port}/hosts", "10.233.2.9")
    assert (lines, ssh_hosts) == ("10.233.2.9:1\n10.233.1.5:2\n", "")


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's client")
def test_the_chiefs_ssh_reaches_the_address_behind_each_name(tmp_path):
    """ssh as the chief runs it: ~/.ssh/config (from the job's Secret) includes the names;
    `ssh -p PORT NAME` goes to the IPv6 address, with the job's settings."""
    ssh_hosts = tmp_path / "ssh-hosts"
    config = tmp_path / "config"
    config.write_text(manifests.SSH_CLIENT_CONFIG.replace(manifests.SSH_HOSTS_CONFIG, str(ssh_hosts)))

    def resolved(name):
        shown = subprocess.run(["ssh", "-G", "-F", str(config), "-p", "12345", name], capture_output=True,
                               text=True, check=True).stdout
        return {key: value for key, _, value in (line.partition(" ") for line in shown.splitlines())
                if key in ("hostname", "port", "user", "stricthostkeychecking")}

    # Before the chief wrote any name (an IPv4 job never does), the Include matches nothing.
    assert resolved("10.233.1.5")["hostname"] == "10.233.1.5"
    ssh_hosts.write_text("Host ipv6-fd00--b\n  HostName fd00::b\n")
    assert resolved("ipv6-fd00--b") == {"hostname": "fd00::b", "port": "12345", "user": "root",
                                        "stricthostkeychecking": "true"}


def test_the_chiefs_hostfile_line_for_a_named_host():
    """chief.sh turns each discovery line into a hostfile line with this sed expression."""
    assert "sed 's/:\\([0-9]*\\)$/ slots=\\1/'" in manifests.CHIEF_SCRIPT
    done = subprocess.run(["sed", "s/:\\([0-9]*\\)$/ slots=\\1/"], input="ipv6-fd00--b:2\n10.0.0.2:1\n",
                          capture_output=True, text=True, check=True)
    assert done.stdout == "ipv6-fd00--b slots=2\n10.0.0.2 slots=1\n"
