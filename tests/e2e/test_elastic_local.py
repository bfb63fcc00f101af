"""Elastic Horovod with base_image/train.py in the training image, without Kubernetes.

What `--elastic` jobs rely on, proven before any cluster exists: under `horovodrun
--min-np 1 --max-np 2 --host-discovery-script ...`, train.py started on two hosts
shrinks to one rank when a worker's container is killed and no longer listed, grows
back to two when the discovery script lists a new host, and finishes with exit 0; rank
0 reports each change with a world-size line. The hosts are those of
test_horovod_local.py (chief and worker pods, each in its own network namespace, ranks
over the job's SSH) plus a spare worker; the discovery script prints a hosts file that
the test rewrites while the job trains.
"""

import os
import re

import pytest

from distributetrain.core.pods import manifests
from localcluster.podman import podman
from harness.polling import poll_until
from test_horovod_local import (  # noqa: F401 (fixtures)
    CHECKPOINT_MOUNT, CHIEF_ADDRESS, DONE_LINE, EPOCH_LINE, HOROVOD_START_TIMEOUT_S, POD_INTERFACE, SSHD_PORT,
    SSHD_READY_TIMEOUT_S, SUBNET, TRAIN_SCRIPT, WORKER_ADDRESS, TwoHosts, checkpoint_mount, opened_hosts, container_of, containers,
    plain_env, rendered_job, ssh_volume_mount, training_image, workdir)

pytestmark = pytest.mark.e2e

DISCOVERY_MOUNT = "/elastic"  # a host directory holding the discovery script and its hosts file
DISCOVERY_SCRIPT = "discover-hosts.sh"
HOSTS_FILE = "hosts"
# Enough epochs that the job is still training when the test has shrunk and grown it;
# few images, so each epoch takes well under a second. With 30 the joining rank's
# TensorFlow import on 2 busy cores (the whole suite running) outlasted the epochs left:
# it grew at the last one, and no epoch followed (two full runs in a row).
EPOCHS = 60
TRAIN_ARGS = ("--samples", "512", "--epochs", str(EPOCHS))
# How long horovodrun waits for enough hosts after a change before failing the job
# (Horovod's default is 600 s): a broken test fails in a minute, not ten.
ELASTIC_TIMEOUT_S = 60
# Each phase includes a TensorFlow import (the first rank's, or the joining rank's) on
# 2 shared cores.
PHASE_TIMEOUT_S = 300
LOG_POLL_S = 0.5

SPARE_ADDRESS = str(SUBNET.network_address + 13)  # a second worker, listed only later

WORLD_SIZE_LINE = re.compile(r"distributetrain: world size (\d+) -> (\d+) at epoch (\d+)")


def write_hosts(directory, *addresses):
    """The discovery script's next answer, one rank per host; replaced whole, so the
    script (run every second by horovodrun) never reads a half-written file."""
    partial = directory / f"{HOSTS_FILE}.partial"
    partial.write_text("".join(f"{address}:1\n" for address in addresses))
    os.replace(partial, directory / HOSTS_FILE)


def discovery_directory(directory):
    directory.mkdir()
    script = directory / DISCOVERY_SCRIPT
    script.write_text(f"#!/bin/sh\nexec cat {DISCOVERY_MOUNT}/{HOSTS_FILE}\n")
    script.chmod(0o755)
    return directory


def wait_for_log(containers, name, pattern, start=0):
    """The first match of pattern in the container's output after offset start."""
    return poll_until(lambda: pattern.search(containers.logs(name), start), PHASE_TIMEOUT_S,
                      lambda: f"{pattern.pattern!r} from {name}:\n{containers.logs(name)}", LOG_POLL_S,
                      hopeless=lambda: not containers.running(name))


def wait_for_exit(containers, name):
    """The container's exit code once it stops."""
    poll_until(lambda: not containers.running(name), PHASE_TIMEOUT_S,
               lambda: f"{name} to exit:\n{containers.logs(name)}", LOG_POLL_S)
    return int(podman(["inspect", "--format", "{{.State.ExitCode}}", name]).stdout)


class ThreeHosts(TwoHosts):
    """TwoHosts and a spare worker host: a pod that becomes ready while the job runs."""

    ROLES = {**TwoHosts.ROLES, "spare": SPARE_ADDRESS}


@pytest.fixture
def three_hosts(containers, workdir):
    with opened_hosts(ThreeHosts, containers, workdir) as hosts:
        yield hosts


def start_worker(containers, hosts, role, address, worker_pod, secret, workdir, checkpoints):
    """A worker pod's container (its own command: sshd) on the given host, once it accepts connections."""
    name = containers.start(
        role,
        [*hosts.container_options(role), *plain_env(worker_pod),
         ssh_volume_mount(worker_pod, secret, workdir / f"{role}-ssh"), checkpoint_mount(checkpoints)],
        container_of(worker_pod)["args"])
    poll_until(lambda: hosts.accepts_connection("chief", address, SSHD_PORT), SSHD_READY_TIMEOUT_S,
               lambda: f"sshd of {name} listening:\n{containers.logs(name)}",
               LOG_POLL_S, hopeless=lambda: not containers.running(name))
    return name


@pytest.fixture
def elastic_run(containers, three_hosts, workdir):
    """One elastic job: starts on the chief and the worker, shrinks when the worker is
    killed and unlisted, grows when the spare is listed. Its exit code and output, and
    the chief's checkpoint directory."""
    secret, worker_pod, chief_pod = rendered_job(containers.name("job"))
    discovery = discovery_directory(workdir / "discovery")
    checkpoints = workdir / "checkpoints"
    checkpoints.mkdir()
    # One checkpoint directory shared by every host, like a job's shared volume: Horovod
    # puts rank 0 on either of the first hosts, and the worker may take it down.
    worker = start_worker(containers, three_hosts, "worker", WORKER_ADDRESS, worker_pod, secret, workdir, checkpoints)
    start_worker(containers, three_hosts, "spare", SPARE_ADDRESS, worker_pod, secret, workdir, checkpoints)

    # Not the chief alone: Horovod 0.28.1 takes the rendezvous address from the first
    # hosts, and with only local ones it is 127.0.0.1 (or, with --network-interface,
    # fails), which hosts added later cannot reach.
    write_hosts(discovery, CHIEF_ADDRESS, WORKER_ADDRESS)
    chief = containers.start(
        "chief",
        [*three_hosts.container_options("chief"), ssh_volume_mount(chief_pod, secret, workdir / "chief-ssh"),
         f"--mount=type=bind,source={discovery},destination={DISCOVERY_MOUNT},ro=true",
         checkpoint_mount(checkpoints)],
        # The chief's ssh first on PATH, as chief.sh puts it: it names the job's config file.
        ["/bin/sh", "-c", manifests.SSH_WRAPPER_SCRIPT + 'exec "$@"', "chief",
         "horovodrun", "--gloo", "-np", "2", "--min-np", "1", "--max-np", "2",
         "--host-discovery-script", f"{DISCOVERY_MOUNT}/{DISCOVERY_SCRIPT}",
         "--elastic-timeout", str(ELASTIC_TIMEOUT_S), "--start-timeout", str(HOROVOD_START_TIMEOUT_S),
         # Ranks meet in Gloo after each one's TensorFlow import: the 30 s default is too
         # short for that on 2 busy cores.
         "--gloo-timeout-seconds", str(HOROVOD_START_TIMEOUT_S),
         "-p", str(SSHD_PORT), "--network-interface", POD_INTERFACE,
         "python", TRAIN_SCRIPT, *TRAIN_ARGS, "--checkpoint-dir", CHECKPOINT_MOUNT])
    first_epoch = wait_for_log(containers, chief, EPOCH_LINE)

    # As when a worker pod is deleted: its processes die, then discovery stops listing it.
    containers.remove(worker)
    write_hosts(discovery, CHIEF_ADDRESS)
    shrunk = wait_for_log(containers, chief, WORLD_SIZE_LINE, first_epoch.end())
    wait_for_log(containers, chief, EPOCH_LINE, shrunk.end())

    write_hosts(discovery, CHIEF_ADDRESS, SPARE_ADDRESS)
    grown = wait_for_log(containers, chief, WORLD_SIZE_LINE, shrunk.end())
    wait_for_log(containers, chief, EPOCH_LINE, grown.end())
    return wait_for_exit(containers, chief), containers.logs(chief), checkpoints


def test_job_shrinks_and_grows_and_finishes(elastic_run):
    exit_code, output, checkpoints = elastic_run
    assert exit_code == 0, output

    changes = [tuple(int(g) for g in m.groups()) for m in WORLD_SIZE_LINE.finditer(output)]
    assert [(before, after) for before, after, _ in changes] == [(2, 1), (1, 2)], output
    (_, _, shrank_at), (_, _, grew_at) = changes
    assert 1 < shrank_at < grew_at <= EPOCHS, output

    # Each epoch line shows the size it trained with. An epoch may be reported twice: one
    # cut short by the killed rank is trained again from the last commit. And one may not
    # be reported at all: the last the killed rank trained and committed, when it was rank
    # 0 and died before its line came through (the shrink then resumes after it, and its
    # world-size line names the next epoch).
    sizes = {int(m.group(1)): int(m.group(5)) for m in EPOCH_LINE.finditer(output)}
    assert set(sizes) <= set(range(1, EPOCHS + 1)), output
    assert set(range(1, EPOCHS + 1)) - set(sizes) <= {shrank_at - 1}, output
    assert {sizes[epoch] for epoch in range(1, shrank_at) if epoch in sizes} <= {2}, output
    assert {sizes[epoch] for epoch in range(shrank_at, grew_at)} == {1}, output
    assert {sizes[epoch] for epoch in range(grew_at, EPOCHS + 1)} == {2}, output

    done = DONE_LINE.search(output)
    assert done and done.group(1, 2, 4) == ("0", str(EPOCHS), "2"), output
    assert float(done.group(3)) > 0.5, output  # still learning after two resets
    assert (checkpoints / f"checkpoint-{EPOCHS:04d}.index").exists()
