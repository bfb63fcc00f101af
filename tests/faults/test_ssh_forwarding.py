"""A worker's sshd refuses every port forward, even to a client holding the job's own key:
a job's key must not turn a worker into a tunnel into the cluster network."""

import base64
import socket
import subprocess
import time

import pytest

from jobharness import SCRIPTS, job_args, node_pool, release_ranks, script_volume

pytestmark = pytest.mark.cluster

SSH_PORT = 12345  # the job's port (the default)
FORWARD_TIMEOUT_S = 20


def job_key(jobs, job: str, path) -> None:
    secret = jobs.core.read_namespaced_secret(f"{job}-ssh", jobs.namespace)
    path.write_text(base64.b64decode(secret.data["id_ed25519"]).decode())
    path.chmod(0o600)


def free_local_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_port_forwards_through_a_worker_are_refused(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        # The ranks hold, so the worker and its sshd stay up while this test probes them.
        jobs.submit("fwd", job_args(pool, claim, 2, "--delete-chief", script_args=("0", "hold")))
        try:
            # Training: the worker is Ready and the chief runs (it runs from its creation,
            # waiting for the workers' addresses).
            jobs.wait_for("fwd", lambda p: (p["metadata"].get("annotations") or {}).get(
                "distributetrain.io/phase") == "Training", 90)
        except AssertionError as e:
            raise AssertionError(f"{e}\nthe manager's log:\n{jobs.log_tail('fwd')}") from None
        worker_ip = jobs.pod("fwd-worker-0")["status"]["podIP"]
        key = tmp_path / "job_key"
        job_key(jobs, "fwd", key)
        ssh = ["ssh", "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
               "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
               "-p", str(SSH_PORT)]
        target = f"distributetrain@{worker_ip}"  # base_image/Dockerfile's uid 1000: the one user its sshd logs in

        # The key is good: a plain command runs (so every refusal below is the forward's).
        allowed = subprocess.run([*ssh, target, "true"], capture_output=True, text=True, timeout=FORWARD_TIMEOUT_S)
        assert allowed.returncode == 0, allowed.stderr

        # stdio forward (ssh -W, i.e. ProxyJump) to the worker's own sshd: allowed, it
        # would print that sshd's "SSH-2.0-" banner.
        stdio = subprocess.run([*ssh, "-W", f"127.0.0.1:{SSH_PORT}", target], stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=FORWARD_TIMEOUT_S)
        assert stdio.returncode == 255 and b"SSH-2.0-" not in stdio.stdout, stdio
        assert b"administratively prohibited" in stdio.stderr, stdio.stderr

        # Remote forward (ssh -R): the server refuses to listen for the client.
        remote = subprocess.run([*ssh, "-N", "-o", "ExitOnForwardFailure=yes", "-R", "127.0.0.1:0:127.0.0.1:22",
                                 target], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=FORWARD_TIMEOUT_S)
        assert remote.returncode == 255 and "remote port forwarding failed" in remote.stderr, remote.stderr

        # Local forward (ssh -L): the client listens, but each connection through it is
        # refused by the worker and closed before a byte of the target arrives.
        local_port = free_local_port()
        tunnel = subprocess.Popen([*ssh, "-N", "-L", f"127.0.0.1:{local_port}:127.0.0.1:{SSH_PORT}", target],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            received = None
            for _ in range(50):  # until the client listens
                try:
                    with socket.create_connection(("127.0.0.1", local_port), timeout=5) as through:
                        through.settimeout(10)
                        received = through.recv(64)
                    break
                except ConnectionRefusedError:
                    assert tunnel.poll() is None, tunnel.stderr.read()
                    time.sleep(0.2)
            assert received == b"", received  # closed at once, no "SSH-2.0-" banner
        finally:
            # SIGKILL, not SIGTERM: on CI this idle `ssh -N` (OpenSSH 9.2) was still running
            # 20 s after a SIGTERM. Its refusal is already on stderr, which the pipe keeps.
            tunnel.kill()
            _, stderr = tunnel.communicate(timeout=FORWARD_TIMEOUT_S)
        assert b"administratively prohibited" in stderr, stderr

        release_ranks(tmp_path)
        assert jobs.exit_code("fwd") == 0, jobs.report("fwd")
