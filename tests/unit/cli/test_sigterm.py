"""A user's command stopped by SIGTERM leaves no copy of the kubeconfig's certificate behind.

The client writes a kubeconfig's embedded certificates and keys to the temporary
directory and deletes them at exit (atexit), which Python's default SIGTERM skips. A real
process, a real kubeconfig, and an API server that accepts connections and never answers,
so the command is mid-request when the signal comes.
"""

import base64
import os
import signal
import socket
import subprocess
import sys

import certifi
import yaml

from distributetrain.core import exitcodes

STARTED_TIMEOUT_S = 30.0  # the interpreter, the client's import, the kubeconfig loaded
EXIT_TIMEOUT_S = 10.0


def a_certificate() -> bytes:
    """Any well-formed PEM certificate: the client copies it before any connection."""
    bundle = open(certifi.where(), "rb").read()
    end = b"-----END CERTIFICATE-----\n"
    return bundle[bundle.index(b"-----BEGIN CERTIFICATE-----"):bundle.index(end) + len(end)]


def test_sigterm_mid_request_exits_143_and_deletes_the_kubeconfig_s_certificate_copy(tmp_path):
    silent = socket.create_server(("127.0.0.1", 0))  # the kernel completes connections; nothing answers
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "user",
        "clusters": [{"name": "c", "cluster": {
            "server": f"https://127.0.0.1:{silent.getsockname()[1]}",
            "certificate-authority-data": base64.b64encode(a_certificate()).decode()}}],
        "users": [{"name": "u", "user": {"token": "the-users-token"}}],
        "contexts": [{"name": "user", "context": {"cluster": "c", "user": "u", "namespace": "team"}}],
    }))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary), "KUBECONFIG": str(kubeconfig)}
    command = subprocess.Popen([sys.executable, "-m", "distributetrain", "list"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        silent.settimeout(STARTED_TIMEOUT_S)
        held, _ = silent.accept()  # the command is mid-request, its copy written
        assert os.listdir(temporary), "the client wrote no copy of the certificate"
        command.send_signal(signal.SIGTERM)
        code = command.wait(EXIT_TIMEOUT_S)
        held.close()
    finally:
        command.kill()
        command.wait()
        silent.close()
    assert code == exitcodes.CANCELLED, command.stderr.read().decode()[-2000:]
    assert os.listdir(temporary) == [], "the copy outlived the command"
