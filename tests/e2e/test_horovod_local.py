"""Real Horovod training with base_image/train.py in the training image, without Kubernetes.

Two things the project's pods depend on are proven here, in containers of the built
image (the host has no TensorFlow, Horovod or sshd), before any cluster exists:
horovodrun trains with Gloo in one container (size, loss, rank-0 checkpoints, resume
from a mounted checkpoint directory, failure exit code), and it launches ranks on
another host over SSH exactly the way the chief reaches its workers. For that, the
worker and chief pods are rendered by distributetrain.core.pods.manifests with fresh keys from
distributetrain.core.pods.sshkeys: the worker container runs the pod's own command (WORKER_SCRIPT,
sshd from the command line) and both get the pod's SSH Secret files at the pod's paths,
so a change to either breaks this test. Each "host" is a container in a network
namespace of its own on a private bridge, with a pod's hostname and /etc/hosts. The two
pods run as OpenShift runs them (a UID of a namespace's range that the image's /etc/passwd
does not have, group 0), on read-only root filesystems, as their security context says.
"""

import ipaddress
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from distributetrain.core.pods import manifests
from distributetrain.core import names
from distributetrain.core.settings import DEFAULT_FILENAME, JobSettings
from distributetrain.core.pods.sshkeys import JobKeys
from localcluster.podman import PODMAN, podman
from harness.polling import poll_until
from prerequisites import unavailable

pytestmark = pytest.mark.e2e

IMAGE = "distributetrain/base:0.1.0"
TRAIN_SCRIPT = DEFAULT_FILENAME  # where base_image/Dockerfile puts train.py
CHECKPOINT_MOUNT = "/checkpoints"  # a host directory, like a job's PVC
# Small enough that a run takes well under a minute on 2 cores; TensorFlow's import in
# every rank takes most of it.
TRAIN_ARGS = ("--samples", "1024")

HOROVODRUN_TIMEOUT_S = 300
# TensorFlow takes a while to import when several ranks share 2 cores.
HOROVOD_START_TIMEOUT_S = 120
SSHD_PORT = 12345
SSHD_READY_TIMEOUT_S = 30
PROBE_TIMEOUT_S = 5
REMOVE_TIMEOUT_S = 60
# Names of everything a test creates start with this and a per-test suffix. Not "dt":
# the local cluster's teardown deletes every interface named dt* and namespace dt-*.
NAME_PREFIX = "hvt"
RUN_LABEL = "distributetrain.test/horovod-local"

EPOCH_LINE = re.compile(r"epoch=(\d+) loss=([\d.]+) accuracy=([\d.]+) samples_per_sec=([\d.]+) size=(\d+)")
CHECKPOINT_LINE = re.compile(r"checkpoint=(\S+) epoch=(\d+) rank=(\d+)")
DONE_LINE = re.compile(r"done start_epoch=(\d+) epochs=(\d+) .*test_accuracy=([\d.]+) .*size=(\d+)")
# horovodrun 0.28.1's report of the first rank that failed.
RANK_EXIT_LINE = re.compile(r"Exit code: (\d+)")


@pytest.fixture(scope="module")
def training_image():
    """The image's name; skips the module when podman or the image is missing (fails on CI)."""
    if shutil.which(PODMAN) is None:
        unavailable("podman is not installed: these tests run the training image")
    exists = podman(["image", "exists", IMAGE], check=False)
    if exists.returncode == 1:
        unavailable(f"{IMAGE} is not in the project's podman storage; build it: bash scripts/images/build.sh")
    # Anything else (not root, broken storage) is a failure, not a reason to skip.
    assert exists.returncode == 0, f"podman image exists {IMAGE} exited {exists.returncode}: {exists.stderr}"
    return IMAGE


@pytest.fixture(scope="module")
def module_workdir():
    path = Path(tempfile.mkdtemp(prefix=f"{NAME_PREFIX}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def workdir():
    path = Path(tempfile.mkdtemp(prefix=f"{NAME_PREFIX}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Containers:
    """Containers of one test run, named <NAME_PREFIX>-<suffix>-<role>; remove_all() removes them."""

    def __init__(self, image):
        self.image = image
        self.suffix = uuid.uuid4().hex[:6]
        self.names = []

    def name(self, role):
        return f"{NAME_PREFIX}-{self.suffix}-{role}"

    def _run_arguments(self, role, options, command):
        name = self.name(role)
        self.names.append(name)
        # args after the image, not --entrypoint: the image's ENTRYPOINT runs first, as in a pod.
        return ["run", "--name", name, "--pull=never", f"--label={RUN_LABEL}={self.suffix}", *options,
                self.image, *command]

    def run(self, role, options, command):
        """Runs a container to completion; its exit code and output (podman's own errors exit 125-127)."""
        try:
            return podman(self._run_arguments(role, options, command), timeout_s=HOROVODRUN_TIMEOUT_S, check=False)
        finally:
            self.remove(self.name(role))

    def start(self, role, options, command):
        """Starts a container in the background; it stays until remove_all()."""
        podman(self._run_arguments(role, ["--detach", *options], command))
        return self.name(role)

    def running(self, name):
        state = podman(["inspect", "--format", "{{.State.Running}}", name], check=False)
        return state.stdout.strip() == "true"

    def logs(self, name):
        result = podman(["logs", name], check=False)
        return result.stdout + result.stderr

    def remove(self, *names):
        if names:
            podman(["rm", "--force", "--ignore", "--time", "0", *names], timeout_s=REMOVE_TIMEOUT_S, check=False)

    def remove_all(self):
        self.remove(*self.names)
        left = podman(["ps", "--all", "--quiet", "--filter", f"label={RUN_LABEL}={self.suffix}"], check=False)
        assert not left.stdout.strip(), f"containers left after removal: {left.stdout.split()}"


@pytest.fixture
def containers(training_image):
    running = Containers(training_image)
    try:
        yield running
    finally:
        running.remove_all()


def horovodrun(hosts, processes, train_args, extra_args=()):
    """The horovodrun command line (inside the image) that runs train.py."""
    return ["horovodrun", "--gloo", "-np", str(processes), "-H", hosts,
            "--start-timeout", str(HOROVOD_START_TIMEOUT_S), *extra_args,
            "python", TRAIN_SCRIPT, *TRAIN_ARGS, *train_args]


def checkpoint_mount(directory, owner=names.JOB_USER_UID):
    """A host directory for checkpoints, the job user's to write (as a job's volume is)."""
    os.chown(directory, owner, owner)
    return f"--mount=type=bind,source={directory},destination={CHECKPOINT_MOUNT}"


def train_in_one_container(containers, role, train_args, options=()):
    """Two ranks of train.py under horovodrun in one container with no network but loopback."""
    return containers.run(role, ["--network=none", *options], horovodrun("localhost:2", 2, train_args))


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


# --- One container, Gloo over loopback ---------------------------------------------


@pytest.fixture(scope="module")
def first_training(training_image, module_workdir):
    """Two ranks, two epochs, checkpoints in a mounted directory: (result, that directory).

    Shared by the tests below; they copy the directory before writing to it.
    """
    checkpoint_dir = module_workdir / "checkpoints"
    checkpoint_dir.mkdir()
    first = Containers(training_image)
    try:
        result = train_in_one_container(first, "train", ["--epochs", "2", "--checkpoint-dir", CHECKPOINT_MOUNT],
                                        [checkpoint_mount(checkpoint_dir)])
    finally:
        first.remove_all()
    return result, checkpoint_dir


def test_two_ranks_train_and_only_rank_0_checkpoints(first_training):
    result, checkpoint_dir = first_training
    assert result.returncode == 0, describe(result)

    records = epoch_records(result.stdout)
    assert sorted(records) == [1, 2], describe(result)
    assert {size for _, size in records.values()} == {2}
    assert records[2][0] < records[1][0], f"loss did not fall: {records}"

    saves = [(m.group(1), int(m.group(2)), int(m.group(3))) for m in CHECKPOINT_LINE.finditer(result.stdout)]
    assert saves == [(f"{CHECKPOINT_MOUNT}/checkpoint-0001", 1, 0),
                     (f"{CHECKPOINT_MOUNT}/checkpoint-0002", 2, 0)], describe(result)
    # Written through the mount, so they outlive the container.
    assert sorted(p.name for p in checkpoint_dir.glob("*.index")) == ["checkpoint-0001.index",
                                                                       "checkpoint-0002.index"]
    done = DONE_LINE.search(result.stdout)
    assert done and done.group(1, 2, 4) == ("0", "2", "2"), describe(result)


def test_restarted_job_resumes_after_the_last_checkpoint(first_training, containers, workdir):
    first, first_checkpoints = first_training
    assert first.returncode == 0, describe(first)
    first_epoch_loss = epoch_records(first.stdout)[1][0]
    checkpoint_dir = workdir / "checkpoints"
    shutil.copytree(first_checkpoints, checkpoint_dir)

    # A new container: all it shares with the first run is the mounted directory.
    resumed = train_in_one_container(containers, "resume", ["--epochs", "3", "--checkpoint-dir", CHECKPOINT_MOUNT],
                                     [checkpoint_mount(checkpoint_dir)])
    assert resumed.returncode == 0, describe(resumed)
    assert f"resumed epoch=2 checkpoint_dir={CHECKPOINT_MOUNT}" in resumed.stdout, describe(resumed)
    records = epoch_records(resumed.stdout)
    assert sorted(records) == [3], describe(resumed)
    # Restored weights carry on from where the first run stopped instead of starting over.
    assert records[3][0] < first_epoch_loss, f"resumed loss {records[3][0]} vs first epoch's {first_epoch_loss}"
    assert DONE_LINE.search(resumed.stdout).group(1, 2) == ("2", "3")
    assert (checkpoint_dir / "checkpoint-0003.index").exists()


def test_failing_script_fails_the_job(containers):
    result = train_in_one_container(containers, "fail", ["--data-dir", "/no-such-data"])
    # horovodrun's own exit code, which the chief pod and so the job report; podman's
    # errors would be 125-127.
    assert result.returncode == 1, describe(result)
    assert "FileNotFoundError" in result.stderr + result.stdout, describe(result)
    # train.py exits 1 on any exception, and horovodrun names that as the rank's exit code.
    assert RANK_EXIT_LINE.search(result.stderr + result.stdout).group(1) == "1", describe(result)


# --- Two hosts over SSH -------------------------------------------------------------

# Not the local cluster's 10.233.0.0/16. The host has no address on the bridge, so two
# test runs (two bridges) may use the same addresses.
SUBNET = ipaddress.ip_network("10.234.0.0/24")
WORKER_ADDRESS = str(SUBNET.network_address + 11)  # runs sshd, like a worker pod
CHIEF_ADDRESS = str(SUBNET.network_address + 12)  # runs horovodrun, like the chief pod
# Pods see one interface named eth0; the namespaces mirror that, so the chief can name it
# to horovodrun as the product's chief does.
POD_INTERFACE = "eth0"


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class TwoHosts:
    """Two pod-like hosts: each a network namespace with an eth0 on a private bridge, a
    hostname and a kubelet-like /etc/hosts in which that hostname resolves to its address.

    The hostname matters: Horovod 0.28.1 creates its process-set Gloo context without
    HOROVOD_GLOO_IFACE and binds it to the address gethostname() resolves to, so a
    hostname resolving to 127.0.0.1 breaks training across hosts.
    """

    ROLES = {"worker": WORKER_ADDRESS, "chief": CHIEF_ADDRESS}

    def __init__(self, suffix, workdir):
        self.workdir = workdir
        self.bridge = f"{NAME_PREFIX}br{suffix}"  # interface names: at most 15 characters
        self.namespaces = {role: f"{NAME_PREFIX}-{suffix}-{role}" for role in self.ROLES}
        self.host_ends = {role: f"{NAME_PREFIX}{suffix}{role[0]}" for role in self.ROLES}

    def open(self):
        ip("link", "add", self.bridge, "type", "bridge")
        ip("link", "set", self.bridge, "up")
        for role, address in self.ROLES.items():
            namespace = self.namespaces[role]
            ip("netns", "add", namespace)
            ip("link", "add", self.host_ends[role], "type", "veth", "peer", "name", POD_INTERFACE,
               "netns", namespace)
            ip("link", "set", self.host_ends[role], "master", self.bridge, "up")
            ip("-n", namespace, "addr", "add", f"{address}/{SUBNET.prefixlen}", "dev", POD_INTERFACE)
            ip("-n", namespace, "link", "set", POD_INTERFACE, "up")
            ip("-n", namespace, "link", "set", "lo", "up")
            self._hosts_file(role).write_text(f"127.0.0.1 localhost\n{address} {namespace}\n")

    def _hosts_file(self, role):
        return self.workdir / f"hosts-{role}"

    def container_options(self, role):
        """podman options that put a container on this host: the agent's, for a pod."""
        return [f"--network=ns:/run/netns/{self.namespaces[role]}", f"--hostname={self.namespaces[role]}",
                "--no-hosts", f"--mount=type=bind,source={self._hosts_file(role)},destination=/etc/hosts,ro=true"]

    def accepts_connection(self, role, address, port):
        """Whether a TCP connection from this host to address:port succeeds (host Python in its netns)."""
        probe = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()"
        return subprocess.run(["ip", "netns", "exec", self.namespaces[role], sys.executable, "-c", probe,
                               address, str(port)], capture_output=True, timeout=PROBE_TIMEOUT_S).returncode == 0

    def close(self):
        for namespace in self.namespaces.values():
            # Nothing else runs in these namespaces once their containers are gone.
            pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-KILL", pid], capture_output=True)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        for host_end in self.host_ends.values():
            subprocess.run(["ip", "link", "del", host_end], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


@contextmanager
def opened_hosts(hosts_class, containers, workdir):
    """Hosts of ``hosts_class``, open; on the way out their containers go before their namespaces."""
    hosts = hosts_class(containers.suffix, workdir)
    try:
        hosts.open()
        yield hosts
    finally:
        try:
            containers.remove_all()
        finally:
            hosts.close()


@pytest.fixture
def two_hosts(containers, workdir):
    with opened_hosts(TwoHosts, containers, workdir) as hosts:
        yield hosts


def rendered_job(name, **options):
    """The job's SSH Secret and its worker and chief pods, as the product builds them
    (``options``: more of the job's settings)."""
    settings = JobSettings(job_name=name, namespace="default", num_gpus=2, image=IMAGE, port=SSHD_PORT, **options)
    keys = JobKeys.generate(name)
    worker = manifests.worker_pod(settings, 0, "worker-node", 1)
    chief = manifests.chief_pod(settings, "chief-node", 1)
    return manifests.ssh_secret(settings, keys), worker, chief


def container_of(pod):
    (container,) = pod["spec"]["containers"]
    return container


def ssh_volume_mount(pod, secret, directory):
    """The pod's SSH Secret volume, written to ``directory`` as the kubelet would (its
    items, its mode, root's in the pod's fsGroup) and mounted read-only where the pod
    mounts it: a podman option."""
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == manifests.SSH_VOLUME)["secret"]
    mount = next(m for m in container_of(pod)["volumeMounts"] if m["name"] == manifests.SSH_VOLUME)
    fs_group = pod["spec"]["securityContext"]["fsGroup"]
    directory.mkdir(mode=0o750)
    os.chown(directory, 0, fs_group)
    for item in volume["items"]:
        path = directory / item["path"]
        path.write_text(secret["stringData"][item["key"]])
        os.chown(path, 0, fs_group)
        path.chmod(volume["defaultMode"])
    return f"--mount=type=bind,source={directory},destination={mount['mountPath']},ro=true"


def pod_runtime(pod):
    """podman options that run a container as the pod's security context and volumes say:
    its user and group (and no /etc/passwd entry podman would add for them: the kubelet adds
    none), a read-only root filesystem (podman's own tmpfs mounts left out), its emptyDir
    volumes as tmpfs."""
    context, container = pod["spec"]["securityContext"], container_of(pod)
    options = []
    if "runAsUser" in context:
        options += ["--passwd=false", f"--user={context['runAsUser']}:{context.get('runAsGroup', 0)}"]
    if container["securityContext"].get("readOnlyRootFilesystem"):
        options += ["--read-only", "--read-only-tmpfs=false"]
    scratch = {v["name"] for v in pod["spec"]["volumes"] if v.get("emptyDir") == {}}
    return options + [f"--mount=type=tmpfs,destination={m['mountPath']},tmpfs-mode=0777"
                      for m in container["volumeMounts"] if m["name"] in scratch]


def plain_env(pod):
    return [f"--env={e['name']}={e['value']}" for e in container_of(pod).get("env", []) if "value" in e]


def wait_for_sshd(hosts, containers, worker):
    """Like the worker's readinessProbe: its port accepts connections (from the chief's host)."""
    poll_until(lambda: hosts.accepts_connection("chief", WORKER_ADDRESS, SSHD_PORT), SSHD_READY_TIMEOUT_S,
               lambda: f"sshd listening on {WORKER_ADDRESS}:{SSHD_PORT}:\n{containers.logs(worker)}", 0.2,
               hopeless=lambda: not containers.running(worker))


# A UID of an OpenShift namespace's range: the image has no /etc/passwd entry for it.
ASSIGNED_UID = 1000680000


def test_ranks_on_two_hosts_over_ssh(containers, two_hosts, workdir):
    secret, worker_pod, chief_pod = rendered_job(containers.name("job"), run_as_user=ASSIGNED_UID, run_as_group=0,
                                                 read_only_root_filesystem=True)
    worker_checkpoints = workdir / "worker-checkpoints"
    worker_checkpoints.mkdir()

    # The worker pod's own command (sshd, every option on its command line) and environment.
    worker = containers.start(
        "worker",
        [*two_hosts.container_options("worker"), *pod_runtime(worker_pod), *plain_env(worker_pod),
         ssh_volume_mount(worker_pod, secret, workdir / "worker-ssh"),
         checkpoint_mount(worker_checkpoints, ASSIGNED_UID)],
        container_of(worker_pod)["args"])
    wait_for_sshd(two_hosts, containers, worker)

    # Rank 0 on the worker: its lines reach the chief's output through SSH, and its
    # checkpoints land in the directory only the worker has, which proves where it ran.
    # horovodrun adds StrictHostKeyChecking=no to its ssh commands, so a plain ssh first
    # proves the job's known_hosts and config (strict checking) let the chief in.
    hosts = f"{WORKER_ADDRESS}:1,{CHIEF_ADDRESS}:1"
    train = horovodrun(hosts, 2, ["--epochs", "2", "--checkpoint-dir", CHECKPOINT_MOUNT],
                       ["-p", str(SSHD_PORT), "--network-interface", POD_INTERFACE])
    # The chief's user, then its ssh first on PATH, as chief.sh puts them: the ssh names the
    # job's config file.
    command = ["/bin/sh", "-c", manifests.JOB_USER_CHECK_SCRIPT + manifests.SSH_WRAPPER_SCRIPT
               + 'ssh -p "$1" "$2" true && shift 2 && exec "$@"', "chief", str(SSHD_PORT), WORKER_ADDRESS, *train]
    result = containers.run(
        "chief",
        [*two_hosts.container_options("chief"), *pod_runtime(chief_pod),
         ssh_volume_mount(chief_pod, secret, workdir / "chief-ssh")],
        command)
    assert result.returncode == 0, describe(result) + "\n--- worker (sshd)\n" + containers.logs(worker)

    records = epoch_records(result.stdout)
    assert sorted(records) == [1, 2] and {size for _, size in records.values()} == {2}, describe(result)
    assert records[2][0] < records[1][0], f"loss did not fall: {records}"
    assert [int(m.group(3)) for m in CHECKPOINT_LINE.finditer(result.stdout)] == [0, 0], describe(result)
    assert sorted(p.name for p in worker_checkpoints.glob("*.index")) == ["checkpoint-0001.index",
                                                                           "checkpoint-0002.index"]
    assert {p.stat().st_uid for p in worker_checkpoints.iterdir()} == {ASSIGNED_UID}
