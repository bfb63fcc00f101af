"""Real Horovod training with base_image/train.py on this machine, without Kubernetes.

Two things the project's pods depend on are proven here before any cluster exists:
horovodrun trains with Gloo (size, loss, rank-0 checkpoints, resume, failure exit
code), and it launches ranks on another host over SSH exactly the way the chief
reaches its workers: sshd on a custom port with a per-job host key and a key-only
root login, the client given its key and known_hosts through an ssh config file.
The two "hosts" are network namespaces on a private bridge, each with its own hostname.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from distributetrain.manifests import SSHD_OPTIONS

pytestmark = pytest.mark.e2e

REPO_DIR = Path(__file__).resolve().parents[2]
TRAIN_SCRIPT = REPO_DIR / "base_image" / "train.py"
HOROVODRUN = Path(sys.executable).parent / "horovodrun"

HOROVODRUN_TIMEOUT_S = 300
# TensorFlow takes a while to import when several ranks share 2 cores.
HOROVOD_START_TIMEOUT_S = 120
SSHD_PORT = 12345
SSHD_READY_TIMEOUT_S = 10

EPOCH_LINE = re.compile(r"epoch=(\d+) loss=([\d.]+) accuracy=([\d.]+) samples_per_sec=([\d.]+) size=(\d+)")
CHECKPOINT_LINE = re.compile(r"checkpoint=(\S+) epoch=(\d+) rank=(\d+)")
DONE_LINE = re.compile(r"done start_epoch=(\d+) epochs=(\d+) .*test_accuracy=([\d.]+) .*size=(\d+)")

if not HOROVODRUN.exists() or importlib.util.find_spec("horovod") is None:
    pytest.skip("Horovod is not installed in this Python; run base_image/install-python.sh",
                allow_module_level=True)


def horovodrun(hosts, processes, train_args, extra_args=(), env=None, cwd=None):
    """Runs train.py under horovodrun and returns the finished process (text output)."""
    command = [str(HOROVODRUN), "-np", str(processes), "-H", hosts,
               "--start-timeout", str(HOROVOD_START_TIMEOUT_S), *extra_args,
               sys.executable, str(TRAIN_SCRIPT), *train_args]
    return subprocess.run(command, capture_output=True, text=True, timeout=HOROVODRUN_TIMEOUT_S,
                          env=env, cwd=cwd)


def epoch_records(output):
    """{epoch: (loss, size)} from rank 0's epoch lines; fails if an epoch is reported twice."""
    records = {}
    for match in EPOCH_LINE.finditer(output):
        epoch = int(match.group(1))
        assert epoch not in records, f"epoch {epoch} reported twice (logs must come from rank 0 only)"
        records[epoch] = (float(match.group(2)), int(match.group(5)))
    return records


def describe(result):
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def test_two_local_ranks_train_and_only_rank_0_checkpoints(tmp_path):
    checkpoint_dir = tmp_path / "checkpoints"
    result = horovodrun("localhost:2", 2, ["--epochs", "2", "--checkpoint-dir", str(checkpoint_dir)])
    assert result.returncode == 0, describe(result)

    records = epoch_records(result.stdout)
    assert sorted(records) == [1, 2], describe(result)
    assert {size for _, size in records.values()} == {2}
    assert records[2][0] < records[1][0], f"loss did not fall: {records}"

    saves = [(int(m.group(2)), int(m.group(3))) for m in CHECKPOINT_LINE.finditer(result.stdout)]
    assert saves == [(1, 0), (2, 0)], describe(result)
    assert sorted(p.name for p in checkpoint_dir.glob("*.index")) == ["checkpoint-0001.index",
                                                                       "checkpoint-0002.index"]
    done = DONE_LINE.search(result.stdout)
    assert done and done.group(1, 2, 4) == ("0", "2", "2"), describe(result)


def test_restarted_job_resumes_after_the_last_checkpoint(tmp_path):
    checkpoint_dir = tmp_path / "checkpoints"
    first = horovodrun("localhost:2", 2, ["--epochs", "1", "--checkpoint-dir", str(checkpoint_dir)])
    assert first.returncode == 0, describe(first)
    first_epoch_loss = epoch_records(first.stdout)[1][0]

    resumed = horovodrun("localhost:2", 2, ["--epochs", "2", "--checkpoint-dir", str(checkpoint_dir)])
    assert resumed.returncode == 0, describe(resumed)
    assert "resumed epoch=1" in resumed.stdout, describe(resumed)
    records = epoch_records(resumed.stdout)
    assert sorted(records) == [2], describe(resumed)
    # Restored weights carry on from where the first run stopped instead of starting over.
    assert records[2][0] < first_epoch_loss
    assert DONE_LINE.search(resumed.stdout).group(1, 2) == ("1", "2")
    assert (checkpoint_dir / "checkpoint-0002.index").exists()


def test_failing_script_fails_the_job(tmp_path):
    result = horovodrun("localhost:2", 2, ["--data-dir", str(tmp_path / "no-such-data")])
    assert result.returncode != 0, describe(result)
    assert "FileNotFoundError" in result.stderr + result.stdout, describe(result)


# --- Two hosts over SSH -------------------------------------------------------------

BRIDGE_SUBNET_PREFIX = "10.250.0."
BRIDGE_PREFIX_LENGTH = 24
WORKER_ADDRESS = BRIDGE_SUBNET_PREFIX + "11"  # runs sshd, like a worker pod
CHIEF_ADDRESS = BRIDGE_SUBNET_PREFIX + "12"  # runs horovodrun, like the chief pod
# Pods see one interface named eth0; the namespaces mirror that so Horovod finds it on both.
POD_INTERFACE = "eth0"


def run_checked(*command):
    subprocess.run(command, check=True, capture_output=True, text=True)


class TwoHosts:
    """Two pod-like hosts: each a network namespace on a private bridge with its own
    hostname that resolves to its address, like a pod's kubelet-written /etc/hosts.

    The hostname matters: Horovod 0.28.1 creates its process-set Gloo context without
    HOROVOD_GLOO_IFACE and binds it to the address gethostname() resolves to, so a
    hostname resolving to 127.0.0.1 breaks training across hosts.
    Everything is named dt-test-* and removed by close().
    """

    def __init__(self, workdir):
        suffix = uuid.uuid4().hex[:5]  # interface names are limited to 15 characters
        self.workdir = workdir
        self.bridge = f"dt-test-br{suffix}"
        self.namespaces = {WORKER_ADDRESS: f"dt-test-w{suffix}", CHIEF_ADDRESS: f"dt-test-c{suffix}"}
        self.host_ends = {WORKER_ADDRESS: f"dt-test-vw{suffix}", CHIEF_ADDRESS: f"dt-test-vc{suffix}"}

    def open(self):
        run_checked("ip", "link", "add", self.bridge, "type", "bridge")
        run_checked("ip", "link", "set", self.bridge, "up")
        for address, namespace in self.namespaces.items():
            host_end = self.host_ends[address]
            run_checked("ip", "netns", "add", namespace)
            run_checked("ip", "link", "add", host_end, "type", "veth", "peer", "name", POD_INTERFACE,
                        "netns", namespace)
            run_checked("ip", "link", "set", host_end, "master", self.bridge, "up")
            run_checked("ip", "-n", namespace, "addr", "add", f"{address}/{BRIDGE_PREFIX_LENGTH}",
                        "dev", POD_INTERFACE)
            run_checked("ip", "-n", namespace, "link", "set", POD_INTERFACE, "up")
            run_checked("ip", "-n", namespace, "link", "set", "lo", "up")
            self._hosts_file(address).write_text(f"127.0.0.1 localhost\n{address} {namespace}\n")

    def _hosts_file(self, address):
        return self.workdir / f"hosts-{self.namespaces[address]}"

    def command_in(self, address, *command):
        """command run on the host: its network, its hostname, its /etc/hosts (host's untouched)."""
        namespace = self.namespaces[address]
        enter_host = f'hostname {namespace} && mount --bind {self._hosts_file(address)} /etc/hosts && exec "$@"'
        return ["ip", "netns", "exec", namespace, "unshare", "--uts", "--mount", "--propagation", "private",
                "sh", "-c", enter_host, "sh", *command]

    def close(self):
        for namespace in self.namespaces.values():
            # Everything inside was started by this test (sshd, its sessions, remote ranks).
            pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-KILL", pid], capture_output=True)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        for host_end in self.host_ends.values():
            subprocess.run(["ip", "link", "del", host_end], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def generate_key(path):
    run_checked("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path))
    return path.with_name(path.name + ".pub").read_text().strip()


def write_ssh_client(directory, identity_file, known_hosts_file):
    """An ssh wrapper for horovodrun's PATH that reads the given config file.

    The chief pod puts the same settings in /root/.ssh/config; this test must not touch
    the host's /root/.ssh, so it points ssh at the file with -F instead.
    """
    config = directory / "ssh_config"
    config.write_text(
        "Host *\n"
        "  User root\n"
        f"  IdentityFile {identity_file}\n"
        "  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {known_hosts_file}\n"
        "  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n"
        "  ConnectTimeout 10\n"
    )
    wrapper = directory / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {config} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper.parent


def wait_for_port(hosts, address, port, sshd, sshd_log):
    deadline = time.monotonic() + SSHD_READY_TIMEOUT_S
    probe = f"import socket; socket.create_connection(('{address}', {port}), timeout=1).close()"
    while time.monotonic() < deadline:
        if sshd.poll() is not None:
            raise AssertionError(f"sshd exited with {sshd.returncode}:\n{sshd_log.read_text()}")
        if subprocess.run(hosts.command_in(CHIEF_ADDRESS, sys.executable, "-c", probe),
                          capture_output=True).returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"sshd did not listen on {address}:{port} within {SSHD_READY_TIMEOUT_S}s")


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and sshd need root")
@pytest.mark.skipif(shutil.which("sshd", path="/usr/sbin") is None,
                    reason="openssh-server missing; run base_image/install-system.sh")
def test_ranks_on_two_hosts_over_ssh(tmp_path):
    ssh_dir = tmp_path / "ssh"
    ssh_dir.mkdir(mode=0o700)
    host_key_public = generate_key(ssh_dir / "host_key")
    client_public = generate_key(ssh_dir / "id_ed25519")
    authorized_keys = ssh_dir / "authorized_keys"
    authorized_keys.write_text(client_public + "\n")
    authorized_keys.chmod(0o600)
    known_hosts = ssh_dir / "known_hosts"
    # Every worker of a job serves the job's one host key, so one wildcard line covers them.
    known_hosts.write_text(f"* {host_key_public}\n")
    ssh_bin = write_ssh_client(ssh_dir, ssh_dir / "id_ed25519", known_hosts)

    hosts = TwoHosts(tmp_path)
    sshd = None
    sshd_log = tmp_path / "sshd.log"
    try:
        hosts.open()
        with open(sshd_log, "w") as sshd_stderr:
            # The worker pod's sshd: no config file, the worker's own options; this test's
            # AuthorizedKeysFile stands in for the one the job's Secret provides.
            sshd = subprocess.Popen(
                hosts.command_in(WORKER_ADDRESS, "sh", "-c", 'mkdir -p /run/sshd && exec "$@"', "sshd",
                                   "/usr/sbin/sshd", "-D", "-e", "-f", "/dev/null",
                                   "-p", str(SSHD_PORT), "-h", str(ssh_dir / "host_key"),
                                   "-o", f"AuthorizedKeysFile={authorized_keys}",
                                   *(arg for option in SSHD_OPTIONS for arg in ("-o", option))),
                stdout=subprocess.DEVNULL, stderr=sshd_stderr)
        wait_for_port(hosts, WORKER_ADDRESS, SSHD_PORT, sshd, sshd_log)

        env = dict(os.environ, PATH=f"{ssh_bin}:{Path(sys.executable).parent}:{os.environ['PATH']}")
        command = [str(HOROVODRUN), "-np", "2", "-H", f"{WORKER_ADDRESS}:1,{CHIEF_ADDRESS}:1",
                   "-p", str(SSHD_PORT), "--start-timeout", str(HOROVOD_START_TIMEOUT_S),
                   sys.executable, str(TRAIN_SCRIPT), "--epochs", "2"]
        result = subprocess.run(hosts.command_in(CHIEF_ADDRESS, *command), capture_output=True, text=True,
                                timeout=HOROVODRUN_TIMEOUT_S, env=env, cwd=tmp_path)
        assert result.returncode == 0, describe(result) + "\n--- sshd\n" + sshd_log.read_text()
        records = epoch_records(result.stdout)
        assert sorted(records) == [1, 2] and {size for _, size in records.values()} == {2}, describe(result)
        assert records[2][0] < records[1][0]
    finally:
        if sshd is not None:
            sshd.kill()
            sshd.wait()
        hosts.close()
