"""The job flags, shared by the manager's commands (``cli``) and ``submit`` (``jobs``).

One parser (``Parser`` raises UsageError instead of exiting) and one set of validators
for both, so what ``submit`` checks on the user's machine is exactly what the manager
accepts, and ``jobs.state`` reads a manager's arguments the way the manager does. Its
own module so that ``cli`` (which registers the jobs commands) and ``jobs`` (which need
the flags) do not import each other.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Sequence

from distributetrain.core import errors, manifests, names, quantity, validation
from distributetrain.core.settings import (
    DEFAULT_CPU_PER_GPU_M,
    DEFAULT_FILENAME,
    DEFAULT_GPU_RESOURCE,
    DEFAULT_LOCK_NAMESPACE,
    DEFAULT_MEMORY_PER_GPU_BYTES,
    DEFAULT_PORT,
    JobSettings,
    PvcMount,
)
from distributetrain.manager import discovery

DEFAULT_CPU_PER_GPU = quantity.format_cpu(DEFAULT_CPU_PER_GPU_M)
DEFAULT_MEMORY_PER_GPU = quantity.format_memory(DEFAULT_MEMORY_PER_GPU_BYTES)

# The manager pod's identity, set from the downward API (manager.yaml, jobs.manager_spec).
ENV_POD_NAME = "MANAGER_POD_NAME"
ENV_POD_NAMESPACE = "MANAGER_POD_NAMESPACE"
ENV_POD_UID = "MANAGER_POD_UID"
ENV_POD_IP = "MANAGER_POD_IP"  # where the chief asks the manager for its hosts
IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting."""

    def error(self, message: str):
        help_hint = f"see '{self.prog} --help'"
        if message.startswith("unrecognized arguments: "):
            flag = message.split(": ", 1)[1].split()[0]
            raise errors.UsageError(flag, f"unknown flag ({help_hint})")
        if message.startswith("the following arguments are required: "):
            missing = message.split(": ", 1)[1]
            raise errors.UsageError(missing.split(",")[0], f"is required ({help_hint})")
        match = re.match(r"argument (\S+?)(?:/\S+)?: (.*)", message)
        if match:
            raise errors.UsageError(match.group(1), f"{match.group(2)} ({help_hint})")
        raise errors.UsageError(self.prog, f"{message} ({help_hint})")


def split_script_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Everything after the first '--' goes to the training script untouched."""
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def checked(flag: str, parse: Callable, text: str):
    """``parse(text)``; its ValueError becomes a UsageError naming ``flag``."""
    try:
        return parse(text)
    except ValueError as e:
        raise errors.UsageError(flag, str(e)) from None


def add_job_flags(parser: argparse.ArgumentParser, require_image: bool = True, manager_identity: bool = True) -> None:
    """The job's flags; ``manager_identity`` adds the two that only the manager pod sets
    (its own name and uid, normally from the downward API), which `submit` never offers."""
    job = parser.add_argument_group("job")
    job.add_argument("--num-gpus", required=True, metavar="N", help="GPUs in all (= Horovod processes)")
    job.add_argument("--image", required=require_image, metavar="IMAGE", help="training image (base_image/)")
    job.add_argument("--port", default=str(DEFAULT_PORT), help=f"workers' sshd port (default {DEFAULT_PORT})")
    job.add_argument("--filename", default=DEFAULT_FILENAME, help=f"training script (default {DEFAULT_FILENAME})")
    job.add_argument("--host-network", default="false", nargs="?", const="true", metavar="true|false",
                     help="run job pods on the node's network (default false)")
    job.add_argument("--namespace", help="namespace of the job (default: the manager's own)")
    if manager_identity:
        job.add_argument("--job-name", help=f"job name (default: ${ENV_POD_NAME}, the manager pod's name)")
        job.add_argument("--owner-uid", help=f"uid owning the job's objects (default: ${ENV_POD_UID})")
    job.add_argument("--gpu-resource", default=DEFAULT_GPU_RESOURCE, help=f"default {DEFAULT_GPU_RESOURCE}")
    job.add_argument("--node-selector", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                     help="only nodes with these labels")
    job.add_argument("--toleration", action="append", default=[], metavar="KEY[=VALUE][:EFFECT]",
                     help="taint the job's pods tolerate (repeatable)")
    job.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                     help="environment of the training script (repeatable; visible in the manager's "
                          "arguments: never for credentials)")
    job.add_argument("--env-from-secret", action="append", default=[], metavar="NAME",
                     help="Secret in the job's namespace whose keys become the training script's "
                          "environment (repeatable; for credentials)")
    job.add_argument("--pvc", action="append", default=[], metavar="CLAIM:/PATH[:ro]",
                     help="PersistentVolumeClaim mounted in every job pod (repeatable)")
    job.add_argument("--worker-ready-timeout", default="5m", metavar="DURATION",
                     help="release and re-plan if workers are not Ready by then (default 5m)")
    job.add_argument("--active-deadline", metavar="DURATION", help="deadline of the whole job (default none)")
    job.add_argument("--orphan-timeout", default="5m", metavar="DURATION",
                     help="a worker whose manager has not answered for this long ends once no chief is "
                          "connected, freeing its GPUs (default 5m)")
    job.add_argument("--wait-for-gpus", default="0s", metavar="DURATION",
                     help="wait this long for free GPUs instead of failing at once (default 0s)")
    job.add_argument("--ssh-attempts", default="30", metavar="N", help="chief's SSH checks per worker (default 30)")
    job.add_argument("--delete-chief", action="store_true", help="delete the chief too when it finishes")
    job.add_argument("--max-restarts", default="0", metavar="N",
                     help="start the job again (re-planned, fresh pods) up to N times when a pod is lost for a "
                          "reason outside the training script (default 0)")
    job.add_argument("--elastic", action="store_true",
                     help="elastic Horovod: a lost worker does not end the job, which goes on while --min-gpus "
                          "remain and grows back as GPUs free up")
    job.add_argument("--min-gpus", metavar="M", help="with --elastic: fewest GPUs to train on (default 1)")
    job.add_argument("--elastic-timeout", default="10m", metavar="DURATION",
                     help="with --elastic: how long to wait for --min-gpus after a loss before failing (default 10m)")
    job.add_argument("--queue", metavar="LOCALQUEUE",
                     help="a Kueue LocalQueue of the job's namespace: each attempt waits there and is admitted "
                          "all or nothing against its quota (default: none, no queue)")
    job.add_argument("--priority-class", metavar="NAME",
                     help="with --queue: a Kueue WorkloadPriorityClass for the job's workload, which may preempt "
                          "workloads of lower priority (default: none, Kueue's default)")
    job.add_argument("--lock-namespace", metavar="NS",
                     help=f"namespace of the placement Lease, shared by every manager that plans on the same "
                          f"GPUs (default {DEFAULT_LOCK_NAMESPACE})")
    job.add_argument("--service-account", default="", help="ServiceAccount of job pods (default: none mounted)")
    job.add_argument("--cpu-per-gpu", default=DEFAULT_CPU_PER_GPU, metavar="CPU",
                     help=f"CPU request of a job pod per GPU it has (default {DEFAULT_CPU_PER_GPU})")
    job.add_argument("--memory-per-gpu", default=DEFAULT_MEMORY_PER_GPU, metavar="MEMORY",
                     help=f"memory request and limit of a job pod per GPU it has (default {DEFAULT_MEMORY_PER_GPU})")
    job.add_argument("--shm-size", metavar="MEMORY",
                     help="size of /dev/shm in every job pod (default: the pod's memory limit)")
    job.add_argument("--mesh-injection", default="false", nargs="?", const="true", metavar="true|false",
                     help="let a service mesh (Istio, Linkerd) inject its sidecar into job pods (default false)")


def own_namespace(explicit: str | None) -> str:
    """``explicit``, else the manager pod's namespace (downward API, then the in-cluster file)."""
    if explicit:
        return explicit
    if os.environ.get(ENV_POD_NAMESPACE):
        return os.environ[ENV_POD_NAMESPACE]
    try:
        with open(IN_CLUSTER_NAMESPACE_FILE) as f:
            return f.read().strip()
    except OSError:
        return "default"


def elastic_min_gpus(args: argparse.Namespace, num_gpus: int) -> int:
    """``--min-gpus`` of an ``--elastic`` job, 0 for a static one."""
    if not args.elastic:
        if args.min_gpus is not None:
            raise errors.UsageError("--min-gpus", "only applies with --elastic")
        return 0
    if num_gpus < 2:
        raise errors.UsageError("--elastic", f"needs --num-gpus 2 or more (one GPU cannot shrink), got {num_gpus}")
    min_gpus = checked("--min-gpus", validation.positive_int, args.min_gpus or "1")
    if min_gpus > num_gpus:
        raise errors.UsageError("--min-gpus", f"must be 1 to --num-gpus ({num_gpus}), got {min_gpus}")
    return min_gpus


def queue_name(args: argparse.Namespace, min_gpus: int) -> str:
    """``--queue``: a LocalQueue's name (a label value), never with ``--elastic``: Kueue
    admits a pod group as a whole, and a group does not grow or shrink."""
    if not args.queue:
        return ""
    if min_gpus:
        raise errors.UsageError("--queue", "cannot be used with --elastic: Kueue admits a job's pods as one group "
                                           "of a fixed size")
    return checked("--queue", validation.dns_label, args.queue)


def priority_class(args: argparse.Namespace) -> str:
    """``--priority-class``: a WorkloadPriorityClass's name, which only a queue reads."""
    if not args.priority_class:
        return ""
    if not args.queue:
        raise errors.UsageError("--priority-class", "only applies with --queue (a Kueue WorkloadPriorityClass)")
    return checked("--priority-class", validation.dns_subdomain, args.priority_class)


def settings_from_args(args: argparse.Namespace, script_args: Sequence[str]) -> JobSettings:
    """Validate every flag; the first bad one raises UsageError naming it."""
    job_name = args.job_name or os.environ.get(ENV_POD_NAME, "")
    if not job_name:
        raise errors.UsageError("--job-name", f"required outside a manager pod (or set ${ENV_POD_NAME})")
    checked("--job-name", lambda t: validation.dns_label(t, names.MAX_JOB_NAME_LENGTH), job_name)
    namespace = checked("--namespace", validation.dns_label, own_namespace(args.namespace))
    host_network = checked("--host-network", validation.boolean, args.host_network)
    port = checked("--port", validation.port, args.port)
    if port < validation.FIRST_UNPRIVILEGED_PORT:
        raise errors.UsageError(
            "--port", f"must be {validation.FIRST_UNPRIVILEGED_PORT} to {validation.MAX_PORT} (the workers' sshd "
            f"runs as a non-root user, with no capability to bind a privileged port), got {port}"
        )
    if not args.filename.startswith("/"):
        raise errors.UsageError("--filename", f"must be an absolute path inside the image, got {args.filename!r}")
    selector = [
        checked("--node-selector", validation.key_value, term)
        for flag in args.node_selector for term in flag.split(",") if term
    ]
    deadline = checked("--active-deadline", validation.duration_s, args.active_deadline) if args.active_deadline else None
    pvcs = tuple(PvcMount(*checked("--pvc", validation.pvc_mount, p)) for p in args.pvc)
    for pvc in pvcs:
        if pvc.mount_path.rstrip("/") == manifests.SHM_PATH:
            raise errors.UsageError("--pvc", f"{manifests.SHM_PATH} is the job's own memory-backed volume "
                                             f"(size it with --shm-size), got {pvc.claim}:{pvc.mount_path}")
    num_gpus = checked("--num-gpus", validation.positive_int, args.num_gpus)
    min_gpus = elastic_min_gpus(args, num_gpus)
    pod_ip = os.environ.get(ENV_POD_IP, "")
    return JobSettings(
        job_name=job_name,
        namespace=namespace,
        num_gpus=num_gpus,
        image=checked("--image", validation.image, args.image),
        owner_uid=args.owner_uid if args.owner_uid is not None else os.environ.get(ENV_POD_UID, ""),
        port=port,
        filename=args.filename,
        host_network=host_network,
        script_args=tuple(script_args),
        env=tuple(checked("--env", validation.env_var, e) for e in args.env),
        env_from_secrets=tuple(checked("--env-from-secret", validation.dns_subdomain, s) for s in args.env_from_secret),
        pvcs=pvcs,
        gpu_resource=checked("--gpu-resource", validation.resource_name, args.gpu_resource),
        node_selector=tuple(selector),
        tolerations=tuple(checked("--toleration", validation.toleration, t) for t in args.toleration),
        worker_ready_timeout_s=checked("--worker-ready-timeout", validation.duration_s, args.worker_ready_timeout),
        orphan_timeout_s=checked("--orphan-timeout", validation.positive_duration_s, args.orphan_timeout),
        active_deadline_s=deadline,
        wait_for_gpus_s=checked("--wait-for-gpus", validation.duration_s, args.wait_for_gpus),
        ssh_connect_attempts=checked("--ssh-attempts", validation.positive_int, args.ssh_attempts),
        delete_chief=args.delete_chief,
        max_restarts=checked("--max-restarts", validation.non_negative_int, args.max_restarts),
        min_gpus=min_gpus,
        elastic_timeout_s=checked("--elastic-timeout", validation.duration_s, args.elastic_timeout),
        discovery_url=discovery.hosts_url(pod_ip) if pod_ip else "",
        manager_namespace=checked("--namespace", validation.dns_label, own_namespace(None)),
        lock_namespace=checked("--lock-namespace", validation.dns_label, args.lock_namespace) if args.lock_namespace else "",
        queue=queue_name(args, min_gpus),
        priority_class=priority_class(args),
        service_account=args.service_account,
        cpu_per_gpu_m=checked("--cpu-per-gpu", quantity.cpu_millis, args.cpu_per_gpu),
        memory_per_gpu_bytes=checked("--memory-per-gpu", quantity.memory_bytes, args.memory_per_gpu),
        shm_size_bytes=checked("--shm-size", quantity.memory_bytes, args.shm_size) if args.shm_size else None,
        mesh_injection=checked("--mesh-injection", validation.boolean, args.mesh_injection),
    )
