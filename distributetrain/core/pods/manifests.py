"""Pure builders of every object a job creates: plain dicts, no API calls.

Keys are generated outside and passed in, and worker addresses are inputs, so the
output is deterministic and tests compare whole objects.
"""

from __future__ import annotations

import math

from distributetrain.core import exitcodes, names, quantity
from distributetrain.core.pods import podknobs, podscripts, podsecurity
from distributetrain.core.pods.newnodepods import NewNodePlace, awaiting_new_node
from distributetrain.core.settings import JobSettings
from distributetrain.core.pods.sshkeys import JobKeys

SSH_VOLUME = "ssh"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"
# Everything the pod scripts write, the chief's files, sshd's and ssh's user entry and the
# home of a user the image does not know (podscripts/job-user.sh), Horovod's and Python's
# temporary files: on an emptyDir, so a read-only root filesystem (a policy may force one)
# breaks none of it.
SCRATCH_VOLUME = "tmp"
SCRATCH_PATH = "/tmp"
# The key files are root's, in the pod's fsGroup (the job's group, or the one the platform
# assigns), readable by that group alone: the user reads them, and sshd and ssh, which
# check the modes only of keys the user owns, accept them. Nothing else in the pod runs as
# root or in that group.
SECRET_MODE = 0o440
CLIENT_KEY_FILE = "id_ed25519"
CLIENT_CONFIG_FILE = "config"
KNOWN_HOSTS_FILE = "known_hosts"
AUTHORIZED_KEYS_FILE = "authorized_keys"
HOST_KEY_FILE = "ssh_host_ed25519_key"
WORKER_READINESS_PERIOD_S = 1  # the chief waits on this; a short period starts training sooner
# The chief waits for the workers' addresses a little longer than the manager may wait for
# them (``hosts_wait_s``): it is the manager that gives up (and deletes the chief).
HOSTS_WAIT_SLACK_S = 60
ORPHAN_CHECK_MAX_S = 30
# Job pods opt out of service-mesh sidecars unless --mesh-injection: SSH and Gloo go from
# pod IP to pod IP on ports no Service names, which a mesh does not carry as its traffic,
# and a sidecar keeps the chief's pod Running once training has ended.
MESH_OPT_OUT_ANNOTATIONS = {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}

# The chief's names for IPv6 hosts (Horovod cannot take a colon in a host), written by
# discover.py; ssh ignores an Include that matches no file.
SSH_HOSTS_CONFIG = f"{SCRATCH_PATH}/distributetrain-ssh-hosts"
# Client side of SSH, the chief's config file (the ssh wrapper passes it with -F). Strict
# host checking against the job's own host key: no fingerprint prompt, and no other host
# can pose as a worker. No User: ssh logs in as the chief's own user, the one the
# workers' sshd runs as.
SSH_CLIENT_CONFIG = f"""\
Include {SSH_HOSTS_CONFIG}
Host *
  IdentityFile {names.SSH_CLIENT_DIR}/{CLIENT_KEY_FILE}
  IdentitiesOnly yes
  UserKnownHostsFile {names.SSH_CLIENT_DIR}/{KNOWN_HOSTS_FILE}
  StrictHostKeyChecking yes
  BatchMode yes
  LogLevel ERROR
"""

# Every sshd setting of a worker, given on its command line with `-f /dev/null`, so no
# sshd_config in the image (a user's image may ship any) can weaken it. sshd runs as the
# pod's user (``podsecurity``), so it can log in that user alone and needs no privilege
# separation directory. StrictModes is off because Secret volumes are world-traversable
# symlink trees owned by root; the key files themselves are readable by the user alone.
SSHD_OPTIONS = (
    "PubkeyAuthentication=yes", "PasswordAuthentication=no", "KbdInteractiveAuthentication=no",
    "PermitRootLogin=no", "UsePAM=no", "StrictModes=no",
    "PermitUserEnvironment=no",
    # horovodrun only runs commands: no forwarding of any kind, so a job's key cannot
    # turn a worker into a tunnel into the cluster. DisableForwarding (OpenSSH 7.4+)
    # covers them all; the others say the same to anyone reading.
    "DisableForwarding=yes", "AllowTcpForwarding=no", "AllowAgentForwarding=no",
    "AllowStreamLocalForwarding=no", "PermitTunnel=no", "X11Forwarding=no",
    # Several workers may share one /run (hostNetwork); every rank connects at once.
    "PidFile=none", "MaxStartups=200", "MaxSessions=200",
)

# Shell functions of the workers: whether a chief is connected, counted in any /proc.
SSHD_SESSIONS_SCRIPT = podscripts.load("sshd-sessions.sh")
# First in both pod scripts: the pod's user, known to ssh and sshd whatever the UID, or
# an image that cannot give it one fails at once, saying so.
# Where distributions put nss_wrapper: RHEL's lib64, Debian's and Ubuntu's multiarch directories.
NSS_WRAPPER_LIBRARIES = ("/usr/lib64/libnss_wrapper.so", "/usr/lib/*/libnss_wrapper.so", "/usr/lib/libnss_wrapper.so")
JOB_USER_CHECK_SCRIPT = podscripts.load(
    "job-user.sh", SCRATCH=SCRATCH_PATH, NSS_WRAPPER_LIBRARIES=" ".join(NSS_WRAPPER_LIBRARIES),
    IMAGE_UNFIT=str(exitcodes.IMAGE_UNFIT))
WORKER_SCRIPT = podscripts.load(
    "worker.sh",
    JOB_USER_CHECK=JOB_USER_CHECK_SCRIPT,
    SSHD_SESSIONS=SSHD_SESSIONS_SCRIPT,
    HOST_KEY=f"{names.SSH_SERVER_DIR}/{HOST_KEY_FILE}",
    AUTHORIZED_KEYS=f"{names.SSH_SERVER_DIR}/{AUTHORIZED_KEYS_FILE}",
    SSHD_OPTIONS=" ".join(f"-o {option}" for option in SSHD_OPTIONS),
    IMAGE_UNFIT=str(exitcodes.IMAGE_UNFIT),
)
# Run first by the chief: its ssh checks the job's host key whatever options horovodrun adds.
SSH_WRAPPER_SCRIPT = podscripts.load("ssh-wrapper.sh", SSH_CONFIG=f"{names.SSH_CLIENT_DIR}/{CLIENT_CONFIG_FILE}")
DISCOVER_SCRIPT = podscripts.load("discover.py", SSH_HOSTS_CONFIG=SSH_HOSTS_CONFIG)
CHIEF_SCRIPT = podscripts.load("chief.sh", JOB_USER_CHECK=JOB_USER_CHECK_SCRIPT, DISCOVER_PY=DISCOVER_SCRIPT,
                               SSH_WRAPPER=SSH_WRAPPER_SCRIPT)


def owner_references(settings: JobSettings) -> list[dict]:
    """The manager pod owns what its job creates (the garbage collector deletes it with
    the manager), but does not control it: Kueue takes a pod whose controller it manages
    for part of that parent's workload, which would let a queued job's pods past the
    queue (and, where Kueue manages pods without a queue name, every job's)."""
    if not settings.owns_objects:
        return []
    return [{"apiVersion": "v1", "kind": "Pod", "name": settings.job_name, "uid": settings.owner_uid}]


def _metadata(settings: JobSettings, name: str, role: str, extra_labels: dict | None = None) -> dict:
    labels = names.job_labels(settings.job_name, role, settings.owner_uid) | (extra_labels or {})
    metadata = {"name": name, "namespace": settings.namespace, "labels": labels}
    owners = owner_references(settings)
    if owners:
        metadata["ownerReferences"] = owners
    return metadata


def ssh_secret(settings: JobSettings, keys: JobKeys) -> dict:
    host_public = keys.host.public_openssh.rsplit(" ", 1)[0]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(settings, names.secret_name(settings.job_name), "ssh"),
        "type": "Opaque",
        "stringData": {
            CLIENT_KEY_FILE: keys.client.private_openssh,
            AUTHORIZED_KEYS_FILE: keys.client.public_openssh + "\n",
            HOST_KEY_FILE: keys.host.private_openssh,
            # One pattern for every worker: they all present the job's host key.
            KNOWN_HOSTS_FILE: f"* {host_public}\n",
            CLIENT_CONFIG_FILE: SSH_CLIENT_CONFIG,
        },
    }


def _ssh_volume(settings: JobSettings, files: list[str]) -> dict:
    return {
        "name": SSH_VOLUME,
        "secret": {
            "secretName": names.secret_name(settings.job_name),
            "defaultMode": SECRET_MODE,
            "items": [{"key": f, "path": f} for f in files],
        },
    }


def _pvc_volumes(settings: JobSettings) -> tuple[list[dict], list[dict]]:
    volumes, mounts = [], []
    for index, pvc in enumerate(settings.pvcs):
        volume = f"data-{index}"
        volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": pvc.claim, "readOnly": pvc.read_only}})
        mounts.append({"name": volume, "mountPath": pvc.mount_path, "readOnly": pvc.read_only})
    return volumes, mounts


def pinned_to(node: str) -> dict:
    """The affinity that pins a job pod to ``node``: at creation (a planned pod) or at
    admission (a queued one, ``podgroup.pin_patch``)."""
    # Required affinity, not nodeName: the scheduler still checks fit, taints and ports,
    # so a plan that went stale stays Pending instead of overcommitting a node. By the
    # Node's name (a field, as the DaemonSet controller pins), not its kubernetes.io/hostname
    # label: the plan names nodes by metadata.name, and the two differ on EKS with
    # Karpenter and on kops ("ip-10-0-1-7.ec2.internal" vs "ip-10-0-1-7").
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        }
    }


def _pod_spec(settings: JobSettings, node: str | None, container: dict, volumes: list[dict]) -> dict:
    spec = {
        "restartPolicy": "Never",
        # No node: a queued attempt's pod, pinned once Kueue admits it (``podgroup``).
        **({"affinity": pinned_to(node)} if node is not None else {}),
        "securityContext": podsecurity.job_pod_security_context(settings),
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": int(settings.termination_grace_period_s),
        "enableServiceLinks": False,
    }
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    else:
        spec["automountServiceAccountToken"] = False  # training needs no API access
    if settings.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    # Always: every job pod asks for GPUs, and GPU nodes are often tainted with their resource.
    spec["tolerations"] = [dict(t) for t in settings.pod_tolerations]
    spec.update(podknobs.spec_fields(settings))
    if settings.active_deadline_s:
        # Belt and braces: even if the manager dies hard, the pods release their GPUs.
        spec["activeDeadlineSeconds"] = max(1, int(settings.active_deadline_s))
    return spec


def _resources(settings: JobSettings, share: int) -> dict:
    """GPUs, and cpu and memory in proportion to them; memory is limited (to its request
    unless --memory-limit-per-gpu), so a rank that outgrows it is killed alone instead of
    starving the node; CPU only with --cpu-limit-per-gpu (ranks use idle cores)."""
    limits = {settings.gpu_resource: str(share), "memory": quantity.format_memory(settings.memory_limit_per_gpu * share)}
    if settings.cpu_limit_per_gpu_m:
        limits["cpu"] = quantity.format_cpu(settings.cpu_limit_per_gpu_m * share)
    return {
        "requests": {"cpu": quantity.format_cpu(settings.cpu_per_gpu_m * share),
                     "memory": quantity.format_memory(settings.memory_per_gpu_bytes * share)},
        "limits": limits,
    }


def _shm_volume(settings: JobSettings, share: int) -> dict:
    # NCCL's shared-memory transport and TensorFlow's input pipelines outgrow the
    # container runtime's 64 MiB /dev/shm; a memory-backed emptyDir replaces it.
    size = settings.shm_size_bytes or settings.memory_limit_per_gpu * share
    return {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": quantity.format_memory(size)}}


def _job_pod(
    settings: JobSettings, name: str, role: str, node: str, share: int, container: dict,
    ssh_files: list[str], ssh_dir: str, extra_labels: dict | None = None,
) -> dict:
    """A worker or the chief: pinned to its node, its GPU share, SSH files, the job's volumes."""
    pvc_volumes, pvc_mounts = _pvc_volumes(settings)
    container = container | {
        "image": settings.image,
        "resources": _resources(settings, share),
        "securityContext": podsecurity.container_security_context(settings.read_only_root_filesystem),
        # A script that fails (an image without the job's user, say) leaves its last log
        # lines as the termination message, which the manager reports.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": SSH_VOLUME, "mountPath": ssh_dir, "readOnly": True},
            {"name": SHM_VOLUME, "mountPath": SHM_PATH},
            {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_PATH},
            *pvc_mounts,
        ],
    }
    metadata = _metadata(settings, name, role, extra_labels)
    # Not disrupted while the job runs (names.NO_DISRUPTION_ANNOTATIONS), and no mesh sidecar unless asked.
    metadata["annotations"] = {names.ANNOTATION_GPUS: str(share), **names.NO_DISRUPTION_ANNOTATIONS,
                               **({} if settings.mesh_injection else MESH_OPT_OUT_ANNOTATIONS)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": _pod_spec(
            settings, node, container,
            [_ssh_volume(settings, ssh_files), _shm_volume(settings, share), {"name": SCRATCH_VOLUME, "emptyDir": {}},
             *pvc_volumes],
        ),
    }


def orphan_check_s(orphan_timeout_s: float) -> int:
    """How often a worker asks whether its manager still answers: a few times per timeout,
    at most every ORPHAN_CHECK_MAX_S (each check starts a Python)."""
    return max(1, min(ORPHAN_CHECK_MAX_S, round(orphan_timeout_s / 4)))


def worker_pod(settings: JobSettings, index: int, node: str | None, share: int, attempt: int = 0) -> dict:
    port: dict = {"name": "ssh", "containerPort": settings.port, "protocol": "TCP"}
    if settings.host_network:
        port["hostPort"] = settings.port  # the scheduler then keeps two jobs' sshd apart
    container = {
        "name": names.ROLE_WORKER,
        # args, not command: the image's ENTRYPOINT still runs first (see chief_pod).
        "args": ["/bin/sh", "-c", WORKER_SCRIPT],
        "env": [
            {"name": "DT_PORT", "value": str(settings.port)},
            {"name": "DT_MANAGER_URL", "value": settings.discovery_url},
            {"name": "DT_ORPHAN_AFTER_S", "value": str(round(settings.orphan_timeout_s))},
            {"name": "DT_ORPHAN_CHECK_S", "value": str(orphan_check_s(settings.orphan_timeout_s))},
        ],
        "ports": [port],
        "readinessProbe": {
            "tcpSocket": {"port": settings.port},
            "periodSeconds": WORKER_READINESS_PERIOD_S,
            "failureThreshold": 3,
        },
    }
    return _job_pod(
        settings, names.worker_name(settings.job_name, index, attempt), names.ROLE_WORKER, node, share, container,
        [AUTHORIZED_KEYS_FILE, HOST_KEY_FILE], names.SSH_SERVER_DIR, {names.LABEL_WORKER_INDEX: str(index)},
    )


def _elastic_env(settings: JobSettings) -> list[dict]:
    return [
        {"name": "DT_MIN_PROCS", "value": str(settings.min_gpus)},
        {"name": "DT_ELASTIC_TIMEOUT", "value": str(round(settings.elastic_timeout_s))},
    ]


def hosts_wait_s(settings: JobSettings) -> float:
    """How long the chief asks the manager for its hosts: longer than the manager may take
    to start the attempt once the chief runs. The nodes the cluster adds for the job
    (``manager.placement.scaleup``: --wait-for-gpus, from the manager's start, when the job grows
    it), then the start (``startbudget``): --worker-ready-timeout, and a pod's slow starts
    besides, a node launched for it (--scale-up-timeout) and then its image pull
    (--image-pull-timeout)."""
    new_nodes_s = settings.wait_for_gpus_s if settings.scale_up_node_gpus else 0.0
    return (new_nodes_s + settings.worker_ready_timeout_s + settings.scale_up_timeout_s
            + settings.image_pull_timeout_s + HOSTS_WAIT_SLACK_S)


def chief_pod(settings: JobSettings, node: str | None, share: int, attempt: int = 0) -> dict:
    """Created with the workers; it learns their addresses from the manager (``discovery``)."""
    env = [
        {"name": "DT_CHIEF_ADDRESS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "DT_CHIEF_SLOTS", "value": str(share)},
        {"name": "DT_HOSTS_URL", "value": settings.discovery_url},
        {"name": "DT_HOSTS_WAIT_S", "value": str(round(hosts_wait_s(settings)))},
        {"name": "DT_NUM_PROCS", "value": str(settings.num_gpus)},
        {"name": "DT_PORT", "value": str(settings.port)},
        {"name": "DT_FILENAME", "value": settings.filename},
        {"name": "DT_SSH_ATTEMPTS", "value": str(settings.ssh_connect_attempts)},
        {"name": "DT_SAME_INTERFACES", "value": "false" if settings.host_network else "true"},
        {"name": "DT_GLOO_TIMEOUT", "value": str(math.ceil(settings.gloo_timeout_s))},
        *(_elastic_env(settings) if settings.elastic else []),
        *({"name": name, "value": value} for name, value in settings.env),
    ]
    container = {
        "name": names.ROLE_CHIEF,
        # args, not command, so the image's ENTRYPOINT runs first and then execs these:
        # NGC's sets up CUDA (forward compatibility libraries on LD_LIBRARY_PATH) and
        # exports what it found. horovodrun passes its whole environment on to every rank,
        # those started over SSH on the workers included, so all ranks see the chief's.
        # "$0" of `sh -c` is the script's name; the user's arguments follow as "$@".
        "args": ["/bin/sh", "-c", CHIEF_SCRIPT, "distributetrain-chief", *settings.script_args],
        "env": env,
    }
    if settings.env_from_secrets:
        # The chief's alone, forwarded to every rank like env. A key also in env loses to
        # it (Kubernetes' rule), so no Secret can change the job's own DT_ variables.
        container["envFrom"] = [{"secretRef": {"name": name}} for name in settings.env_from_secrets]
    return _job_pod(
        settings, names.chief_name(settings.job_name, attempt), names.ROLE_CHIEF, node, share, container,
        [CLIENT_KEY_FILE, KNOWN_HOSTS_FILE, CLIENT_CONFIG_FILE], names.SSH_CLIENT_DIR,
    )


def job_objects(settings: JobSettings, plan: list[tuple[str | None, int]], keys: JobKeys, attempt: int = 0,
                new_node_place: NewNodePlace = NewNodePlace()) -> list[dict]:
    """Everything one attempt creates, in creation order: Secret, workers, chief. A share on
    ``names.NEW_NODE`` is a pod for a node the cluster adds (``awaiting_new_node``, in ``new_node_place``)."""
    *worker_shares, (chief_node, chief_share) = plan
    workers = [_placed(settings, worker_pod(settings, i, _node(node), share, attempt), node, new_node_place)
               for i, (node, share) in enumerate(worker_shares)]
    chief = _placed(settings, chief_pod(settings, _node(chief_node), chief_share, attempt), chief_node,
                    new_node_place)
    return [ssh_secret(settings, keys), *workers, chief]


def _node(planned: str | None) -> str | None:
    return None if planned == names.NEW_NODE else planned


def _placed(settings: JobSettings, pod: dict, planned: str | None, place: NewNodePlace) -> dict:
    return awaiting_new_node(settings, pod, place) if planned == names.NEW_NODE else pod
