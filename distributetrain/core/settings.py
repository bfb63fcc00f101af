"""One job's settings: a frozen value parsed and validated at the edge (the CLI).

Everything downstream (placement, manifests, lifecycle) trusts these values. The
defaults here are the only ones: each field's flag, parser and stored form are its entry
in ``core.job.jobspec``'s table, which reads them (a test holds the two together).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from distributetrain.core import names

DEFAULT_PORT = 12345  # the seeds' sshd port
DEFAULT_FILENAME = "/opt/distributetrain/train.py"  # where base_image/Dockerfile puts the example
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
# Requests per GPU of a pod (a pod with 4 GPUs asks for 4x), sized so that the smallest
# common GPU nodes, 4 vCPU and 16 GB with one GPU (AWS g4dn.xlarge and g5.xlarge, GKE
# g2-standard-4 or n1-standard-4 with a T4), still fit one rank after what the kubelet
# reserves and DaemonSets take (about 3.5 CPU and 11 GiB are left on GKE's). Multi-GPU
# nodes give far more per GPU (8-12 vCPU, 30-85 GiB). The CPU request has no limit, so
# ranks still use idle cores; memory is also the limit, so raise it for big input pipelines.
DEFAULT_CPU_PER_GPU_M = 2000  # millicores: 2 CPUs
DEFAULT_MEMORY_PER_GPU_BYTES = 8 * 2**30  # 8Gi
# Where the placement Lease lives unless --lock-namespace says otherwise: one namespace
# for every manager, so jobs in different namespaces never book the same GPUs. `default`
# exists on every cluster and cannot be deleted; rbac/lease-role.yaml grants the Lease there.
DEFAULT_LOCK_NAMESPACE = "default"
# --run-as-user's words (``core.pods.podsecurity``): 1000, or the platform's where the namespace
# says it assigns UIDs (OpenShift); none at all, for the platform to assign.
RUN_AS_AUTO = "auto"
RUN_AS_PLATFORM = "platform"
ELASTIC_MIN_GPUS = 1  # the fewest GPUs an --elastic job trains on, unless --min-gpus says


def gpu_toleration(resource: str) -> dict:
    """The toleration every job pod carries for the taint keyed by its GPU resource.

    GPU node pools are commonly tainted that way (GKE: ``nvidia.com/gpu=present:NoSchedule``)
    so that only pods asking for GPUs land there; the ExtendedResourceToleration admission
    plugin adds this toleration where it is enabled, but not every cluster enables it.
    """
    return {"key": resource, "operator": "Exists", "effect": "NoSchedule"}


# How long a job pod stays on a node that stopped reporting (NotReady) or cannot be
# reached, by default (--node-lost-toleration). Kubernetes' default is 300 s: five minutes
# of a dead worker's GPUs booked and its replacement not started. Short enough that the
# pod is evicted (and the manager restarts or replaces it) in tens of seconds; long enough
# to ride out a kubelet restart.
NODE_LOST_TOLERATION_S = 30
NODE_LOST_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
# Job pods' grace period by default (--termination-grace-period): SIGTERM, then SIGKILL.
TERMINATION_GRACE_S = 10


def node_lost_tolerations(toleration_s: float = NODE_LOST_TOLERATION_S) -> tuple[dict, ...]:
    return tuple({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": int(toleration_s)}
                 for key in NODE_LOST_TAINTS)


@dataclass(frozen=True)
class RuntimeClassTerms:
    """What the job's RuntimeClass (--runtime-class) adds to each of its pods at admission,
    read by the manager from the RuntimeClass itself (``manager.pods.runtimeclass``): its
    ``overhead.podFixed``, which the scheduler counts beside the containers' requests, and
    its ``scheduling``, merged into the pod's nodeSelector and tolerations."""

    overhead: tuple[tuple[str, str], ...] = ()  # resource -> quantity, as the RuntimeClass says them
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[dict, ...] = field(default=(), hash=False)


REQUIRED_MARK = "!"  # after a --topology level: the job never crosses it


@dataclass(frozen=True)
class Level:
    """A level of the network's topology (``--topology``, planned by ``core.placement.topology``)."""

    key: str  # the node label whose values name this level's domains
    required: bool = False  # the job never spans two domains of this level

    @property
    def name(self) -> str:
        """The key's last segment, for messages: "rack" for network.topology.kubernetes.io/rack."""
        return self.key.rpartition("/")[2]

    def __str__(self) -> str:
        return self.key + (REQUIRED_MARK if self.required else "")


@dataclass(frozen=True)
class PvcMount:
    claim: str
    mount_path: str
    read_only: bool = False


@dataclass(frozen=True)
class JobSettings:
    """What one manager run needs to know. Times are seconds.

    Each field's meaning is its flag's help in ``core.job.jobspec.FIELDS`` (what ``--help``
    and docs/flags.md say); the default here is the only one. Comments say only what the
    help does not: units, special values, why."""

    job_name: str  # prefixes every object the job creates
    namespace: str
    num_gpus: int  # split over nodes by placement
    image: str
    owner_uid: str = ""  # every object is owned by it (GC on delete)
    port: int = DEFAULT_PORT  # also horovodrun -p
    filename: str = DEFAULT_FILENAME
    host_network: bool = False  # the port becomes a hostPort
    script_args: tuple[str, ...] = ()  # after `--`: passed to the training script
    env: tuple[tuple[str, str], ...] = ()  # set in the chief; horovodrun forwards them to every rank
    # envFrom of the chief, forwarded to every rank like env: credentials stay out of the
    # manager's arguments and the chief's pod spec.
    env_from_secrets: tuple[str, ...] = ()
    pvcs: tuple[PvcMount, ...] = ()
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[dict, ...] = field(default=(), hash=False)
    # Counts only time in which some pod is neither Ready nor starting slowly (``core.watching.startbudget``).
    worker_ready_timeout_s: float = 300.0
    image_pull_timeout_s: float = 1800.0  # a multi-GB image on a fresh node takes minutes
    scale_up_timeout_s: float = 900.0  # Karpenter, the cluster autoscaler
    active_deadline_s: float | None = None  # from the manager's start; None: none
    wait_for_gpus_s: float = 0.0  # 0: fail fast when GPUs are short
    ssh_connect_attempts: int = 30  # 1 s apart
    max_restarts: int = 0  # after a pod is lost, never after the script fails
    # 0: a static job; an elastic one trains while at least this many of num_gpus remain
    # (ELASTIC_MIN_GPUS unless --min-gpus says), and replaces lost workers as GPUs free up.
    min_gpus: int = 0
    elastic_timeout_s: float = 600.0  # horovodrun's own default
    # Ranks wait this long for a peer in a collective or a rendezvous: a lost peer costs
    # the survivors that long before the world shrinks, and a joining rank must import
    # TensorFlow within it (horovodrun's 30 s default is too short for that on busy nodes).
    gloo_timeout_s: float = 120.0
    discovery_url: str = ""  # where the chief's discovery script reads the hosts (the manager pod)
    # A manager whose node hung stays Terminating and no garbage collector deletes its
    # pods, which would otherwise hold their GPUs for ever.
    orphan_timeout_s: float = 300.0
    delete_chief: bool = False  # kept for its logs unless asked
    lock_namespace: str = ""  # "": DEFAULT_LOCK_NAMESPACE
    queue: str = ""  # "": outside Kueue
    priority_class: str = ""
    manager_namespace: str = ""  # "": namespace
    service_account: str = ""  # "": no API token mounted at all
    # Requests are these times the pod's GPUs, so it is never BestEffort (evicted first)
    # and passes a namespace's ResourceQuota or LimitRange that requires them.
    cpu_per_gpu_m: int = DEFAULT_CPU_PER_GPU_M
    memory_per_gpu_bytes: int = DEFAULT_MEMORY_PER_GPU_BYTES
    # None: the pod's memory limit. What a memory-backed volume holds counts against that
    # limit anyway, so a larger size would add nothing, and the runtime's default of 64 MiB
    # makes NCCL and TensorFlow fail or crawl.
    shm_size_bytes: int | None = None
    # False: a node whose GPU units share devices or are MIG slices takes one rank at most
    # (``gpusharing``): Horovod pins one device per local rank.
    allow_shared_gpus: bool = False
    topology: tuple[Level, ...] = ()  # planned by ``core.placement.topology``; empty: the network is flat
    # Off: SSH and Gloo between pod IPs are not traffic a mesh carries, and a sidecar keeps
    # the chief's pod Running after training.
    mesh_injection: bool = False
    network_policy: bool = True  # ``core.pods.networkpolicy``; off: the namespace's own policies alone
    scale_up_node_gpus: int = 0  # ``core.placement.scaleup``; 0: wait for GPUs to free up, as without an autoscaler
    device_class: str = ""  # "": no DRA GPUs (nothing of resource.k8s.io is read)
    # A UID, RUN_AS_AUTO or RUN_AS_PLATFORM (``core.pods.podsecurity``); the group None: the UID,
    # or the platform's where it assigns the UID.
    run_as_user: int | str = RUN_AS_AUTO
    run_as_group: int | None = None
    read_only_root_filesystem: bool = False  # what the pod scripts write is on volumes
    # Pod knobs (docs/job-pods.md#pod-knobs).
    image_pull_secrets: tuple[str, ...] = ()
    runtime_class: str = ""  # "": the node's default
    pod_priority_class: str = ""  # scheduling.k8s.io's, not Kueue's priority_class
    termination_grace_period_s: float = TERMINATION_GRACE_S
    # Also how long the manager waits before it deletes them itself (``nodewatch``).
    node_lost_toleration_s: float = NODE_LOST_TOLERATION_S
    cpu_limit_per_gpu_m: int | None = None  # None: none (ranks use idle cores)
    memory_limit_per_gpu_bytes: int | None = None  # None: the request
    # Read from the RuntimeClass by the manager (no flag): what admission adds to each pod.
    runtime_class_terms: RuntimeClassTerms = field(default=RuntimeClassTerms(), hash=False)

    @property
    def pod_tolerations(self) -> tuple[dict, ...]:
        """What job pods tolerate: their GPUs' taint, a lost node briefly, then the user's ``--toleration``s."""
        own = (gpu_toleration(self.gpu_resource), *node_lost_tolerations(self.node_lost_toleration_s))
        return (*own, *(t for t in self.tolerations if t not in own))

    @property
    def candidate_tolerations(self) -> tuple[dict, ...]:
        """The taints a node may carry for the job's pods: ``--toleration``s and the RuntimeClass's."""
        return (*self.tolerations, *self.runtime_class_terms.tolerations)

    @property
    def candidate_selector(self) -> dict[str, str]:
        """The labels a node needs for the job's pods: ``--node-selector`` and the RuntimeClass's."""
        return {**dict(self.runtime_class_terms.node_selector), **dict(self.node_selector)}

    @property
    def memory_limit_per_gpu(self) -> int:
        return self.memory_limit_per_gpu_bytes or self.memory_per_gpu_bytes

    @property
    def elastic(self) -> bool:
        return self.min_gpus > 0

    @property
    def selector(self) -> str:
        """The job's objects of this manager's run (never an earlier run's of the same name)."""
        return names.job_selector(self.job_name, self.owner_uid)

    @property
    def own_namespace(self) -> str:
        """Where the manager pod itself lives (its annotations, its Role)."""
        return self.manager_namespace or self.namespace

    @property
    def lease_namespace(self) -> str:
        return self.lock_namespace or DEFAULT_LOCK_NAMESPACE

    @property
    def owns_objects(self) -> bool:
        # Owner references cannot cross namespaces: the garbage collector would treat
        # the owner as absent and delete the job's pods at once.
        return bool(self.owner_uid) and self.own_namespace == self.namespace

    def replace(self, **changes) -> "JobSettings":
        return dataclasses.replace(self, **changes)
