"""Every ssh that horovodrun runs checks the job's host key: the real OpenSSH client and
sshd of the training image, without Kubernetes.

horovodrun 0.28.1 runs ``ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no
HOST -p PORT ...`` (horovod/runner/util/remote.py) for its checks, its task servers and
every rank on another host, elastic replacements included; an option on ssh's command
line beats the chief's ssh config file. Here a worker container runs the worker pod's own
sshd script with the job's authorized key but ANOTHER job's host key (an impostor that
would let the job in), beside a genuine worker. The chief container gets the job's
SSH files as the chief pod mounts them and runs horovod's own ssh command line, as
horovod builds it, before and after the chief script's ssh set-up
(``manifests.SSH_WRAPPER_SCRIPT``, which chief.sh runs before anything else).
"""

import os
import shutil
import uuid

import pytest

from distributetrain.core.pods import manifests
from distributetrain.core import names
from distributetrain.core.settings import JobSettings
from distributetrain.core.pods.sshkeys import JobKeys
from localcluster.podman import PODMAN, labelled_containers, podman
from prerequisites import unavailable

pytestmark = pytest.mark.e2e

IMAGE = "distributetrain/base:0.1.0"
IMPOSTOR_PORT = 12345
GENUINE_PORT = 12346
CHECKED_PORT = 12347  # `sshd -t` only parses its options: nothing listens
SSHD_READY_TIMEOUT_S = 30
CHIEF_TIMEOUT_S = 120
NAME_PREFIX = "hkt"  # not "dt": the local cluster's teardown owns dt-* names
RUN_LABEL = "distributetrain.test/ssh-host-keys"
HOST_KEY_REFUSED = "Host key verification failed"

# In the chief: horovod's own ssh command for "true" on a worker port, as horovod builds it.
HOROVOD_SSH = """python -c 'import sys
from horovod.runner.util.remote import get_ssh_command
print(get_ssh_command("true", "127.0.0.1", port=int(sys.argv[1])))' {port}"""
WAIT_FOR_PORTS = """python - <<'WAIT'
import socket, time
deadline = time.monotonic() + {timeout}
for port in ({ports}):
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"sshd is not listening on {{port}}")
            time.sleep(0.2)
WAIT
"""


@pytest.fixture(scope="module")
def image():
    if shutil.which(PODMAN) is None:
        unavailable("podman is not installed: this test runs sshd and ssh of the training image")
    exists = podman(["image", "exists", IMAGE], check=False)
    if exists.returncode == 1:
        unavailable(f"{IMAGE} is not in the project's podman storage; build it: bash scripts/images/build.sh")
    assert exists.returncode == 0, f"podman image exists {IMAGE} exited {exists.returncode}: {exists.stderr}"
    tools = podman(["run", "--rm", "--pull=never", "--network=none", IMAGE, "sh", "-c",
                    "command -v ssh && test -x /usr/sbin/sshd"], check=False)
    if tools.returncode != 0:
        unavailable(f"{IMAGE} has no ssh client or no /usr/sbin/sshd")
    return IMAGE


@pytest.fixture
def containers(image):
    suffix = uuid.uuid4().hex[:6]
    names = []

    def run(role, options, command, detach=False):
        """(podman's result, the container's name): a detached start must succeed; a run's
        result is for the caller to judge."""
        name = f"{NAME_PREFIX}-{suffix}-{role}"
        names.append(name)
        return podman(["run", "--name", name, "--pull=never", f"--label={RUN_LABEL}={suffix}",
                       *(["--detach"] if detach else []), *options, image, *command],
                      timeout_s=CHIEF_TIMEOUT_S, check=detach), name

    try:
        yield run
    finally:
        # Newest first: a container that joined another's network namespace holds it,
        # and podman refuses to remove the holder before it (the holder would leak).
        for name in reversed(names):
            podman(["rm", "--force", "--ignore", "--time", "0", name], check=False)
        left = labelled_containers(RUN_LABEL)
        assert suffix not in left.values(), f"containers of this test left behind: {left}"


def secret_files(directory, secret, files, mount_path):
    """Files of the job's SSH Secret written as the kubelet writes a Secret volume of a pod
    with fsGroup (root's, in the job user's group, mode manifests.SECRET_MODE), as a
    read-only podman mount at the pod's path."""
    directory.mkdir(mode=0o750)
    os.chown(directory, 0, names.JOB_USER_UID)
    for name in files:
        path = directory / name
        path.write_text(secret["stringData"][name])
        os.chown(path, 0, names.JOB_USER_UID)
        path.chmod(manifests.SECRET_MODE)
    return f"--mount=type=bind,source={directory},destination={mount_path},ro=true"


def worker_files(directory, secret):
    return secret_files(directory, secret, ["authorized_keys", manifests.HOST_KEY_FILE], names.SSH_SERVER_DIR)


def test_the_images_sshd_accepts_the_worker_s_options(containers):
    """The worker's sshd options, checked by the training image's own sshd (``sshd -t``):
    an option this OpenSSH does not know would stop every worker at start."""
    result, _ = containers("options", ["--network=none"], ["/bin/sh", "-c", f"""set -eu
ssh-keygen -q -t ed25519 -N '' -f /tmp/host_key
/usr/sbin/sshd -t -f /dev/null -p {CHECKED_PORT} -h /tmp/host_key -o AuthorizedKeysFile=/tmp/authorized_keys \\
    {" ".join(f"-o {option}" for option in manifests.SSHD_OPTIONS)}
echo options-accepted"""])
    assert result.returncode == 0 and "options-accepted" in result.stdout, result.stdout + result.stderr


def test_horovods_ssh_reaches_an_impostor_without_the_chiefs_ssh_and_never_with_it(containers, tmp_path):
    settings = JobSettings(job_name="job", namespace="default", num_gpus=2, image=IMAGE)
    job_keys = JobKeys.generate("job")
    secret = manifests.ssh_secret(settings, job_keys)
    # Another job's host key behind the job's own authorized_keys: a host that lets the
    # job's client in, but is not one of the job's workers.
    impostor = manifests.ssh_secret(settings, JobKeys(client=job_keys.client, host=JobKeys.generate("other").host))
    worker = manifests.worker_pod(settings, 0, "node", 1)
    worker_command = worker["spec"]["containers"][0]["args"]
    _, impostor_name = containers(
        "impostor", ["--network=none", f"--env=DT_PORT={IMPOSTOR_PORT}",
                     worker_files(tmp_path / "impostor", impostor)],
        worker_command, detach=True)
    # The genuine worker shares the impostor's network namespace, on the next port.
    containers("genuine", [f"--network=container:{impostor_name}", f"--env=DT_PORT={GENUINE_PORT}",
                           worker_files(tmp_path / "genuine", secret)],
               worker_command, detach=True)

    def horovod_ssh(port, label):
        # horovodrun runs it with `sh -c` (subprocess, shell=True), so PATH picks the ssh.
        return f'sh -c "$({HOROVOD_SSH.format(port=port)})" 2>&1; echo "{label}=$?"'

    config = f"{names.SSH_CLIENT_DIR}/{manifests.CLIENT_CONFIG_FILE}"
    script = "\n".join([
        WAIT_FOR_PORTS.format(timeout=SSHD_READY_TIMEOUT_S, ports=f"{IMPOSTOR_PORT}, {GENUINE_PORT}"),
        'echo "ssh command: $(' + HOROVOD_SSH.format(port=IMPOSTOR_PORT) + ')"',
        # The job's config file alone, strict checking and all, as ssh reads it with -F.
        "mkdir /tmp/config-only",
        f"printf '#!/bin/sh\\nexec /usr/bin/ssh -F {config} \"$@\"\\n' > /tmp/config-only/ssh",
        "chmod +x /tmp/config-only/ssh",
        "(PATH=/tmp/config-only:$PATH; " + horovod_ssh(IMPOSTOR_PORT, "before-impostor") + ")",
        "set -eu",  # as in chief.sh
        manifests.SSH_WRAPPER_SCRIPT,
        "set +eu",
        'echo "ssh on PATH: $(command -v ssh)"',
        horovod_ssh(IMPOSTOR_PORT, "impostor"),
        horovod_ssh(GENUINE_PORT, "genuine"),
    ])
    result, _ = containers(
        "chief", [f"--network=container:{impostor_name}",
                  secret_files(tmp_path / "chief", secret, [manifests.CLIENT_KEY_FILE, manifests.KNOWN_HOSTS_FILE,
                                                          manifests.CLIENT_CONFIG_FILE],
                               names.SSH_CLIENT_DIR)],
        ["/bin/sh", "-c", script])
    output = result.stdout + result.stderr
    codes = dict(line.split("=", 1) for line in output.splitlines()
                 if line.split("=", 1)[0] in ("before-impostor", "impostor", "genuine"))
    assert result.returncode == 0 and "StrictHostKeyChecking=no" in output, output
    # Without the chief's ssh, horovod's command line overrides the config's strict
    # checking: it logs into a host presenting another job's key.
    assert codes["before-impostor"] == "0", output
    # With it, the same command line is refused by that host, and still reaches the genuine one.
    assert "ssh on PATH: /tmp/distributetrain-ssh/ssh" in output, output
    assert codes["impostor"] == "255" and HOST_KEY_REFUSED in output, output
    assert codes["genuine"] == "0", output
