"""One job's settings: a frozen value parsed and validated at the edge (the CLI).

Everything downstream (placement, manifests, lifecycle) trusts these values. The
defaults here are the only ones: each field's flag, parser and stored form are its entry
in ``core.jobspec``'s table, which reads them (a test holds the two together).
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
# --run-as-user's words (``core.podsecurity``): 1000, or the platform's where the namespace
# says it assigns UIDs (OpenShift); none at all, for the platform to assign.
RUN_AS_AUTO = "auto"
RUN_AS_PLATFORM = "platform"


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
    read by the manager from the RuntimeClass itself (``manager.runtimeclass``): its
    ``overhead.podFixed``, which the scheduler counts beside the containers' requests, and
    its ``scheduling``, merged into the pod's nodeSelector and tolerations."""

    overhead: tuple[tuple[str, str], ...] = ()  # resource -> quantity, as the RuntimeClass says them
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[dict, ...] = field(default=(), hash=False)


REQUIRED_MARK = "!"  # after a --topology level: the job never crosses it


@dataclass(frozen=True)
class Level:
    """A level of the network's topology (``--topology``, planned by ``core.topology``)."""

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
    """What one manager run needs to know. Times are seconds."""

    job_name: str  # = the manager pod's name; prefixes every object the job creates
    namespace: str  # where the job's pods and Secret live (default: the manager's own)
    num_gpus: int  # total Horovod processes = GPUs, split over nodes by placement
    image: str  # the training image (base_image/), run by workers and chief
    owner_uid: str = ""  # the manager pod's uid: every object is owned by it (GC on delete)
    port: int = DEFAULT_PORT  # sshd port on workers, and horovodrun -p
    filename: str = DEFAULT_FILENAME  # the training script inside the image or a volume
    host_network: bool = False  # run job pods on the node's network (port becomes a hostPort)
    script_args: tuple[str, ...] = ()  # passed to the training script
    env: tuple[tuple[str, str], ...] = ()  # set in the chief; horovodrun forwards them to every rank
    # Secrets in the job's namespace whose keys become the chief's environment (envFrom),
    # forwarded to every rank like env: credentials stay out of the manager's arguments
    # and the chief's pod spec.
    env_from_secrets: tuple[str, ...] = ()
    pvcs: tuple[PvcMount, ...] = ()  # claims mounted in chief and workers (script, data, checkpoints)
    gpu_resource: str = DEFAULT_GPU_RESOURCE  # extended resource name of the GPUs
    node_selector: tuple[tuple[str, str], ...] = ()  # only nodes with all these labels are candidates
    tolerations: tuple[dict, ...] = field(default=(), hash=False)  # taints the job may land on
    # Workers not all Ready by then: release and re-plan or fail. It counts only time in
    # which some pod is neither Ready nor starting slowly (``core.startbudget``).
    worker_ready_timeout_s: float = 300.0
    # One image pull of a job pod (a multi-GB image on a fresh node takes minutes): not
    # counted against worker_ready_timeout_s, bounded by this instead.
    image_pull_timeout_s: float = 1800.0
    # One job pod waiting for a node an autoscaler launches for it (Karpenter, the cluster
    # autoscaler): not counted against worker_ready_timeout_s, bounded by this instead.
    scale_up_timeout_s: float = 900.0
    active_deadline_s: float | None = None  # whole job, from manager start; also set on pods
    wait_for_gpus_s: float = 0.0  # 0: fail fast when GPUs are short; else wait this long
    ssh_connect_attempts: int = 30  # chief's checks of each worker before horovodrun, 1 s apart
    max_restarts: int = 0  # new attempts allowed after a pod is lost (not after the script fails)
    # Elastic Horovod (--elastic): training goes on while at least min_gpus of num_gpus
    # remain, and lost workers are replaced as GPUs free up. 0: a static job.
    min_gpus: int = 0
    elastic_timeout_s: float = 600.0  # horovodrun waits this long for min_gpus after a loss (its default)
    discovery_url: str = ""  # where the chief's discovery script reads the hosts (the manager pod)
    # A worker whose manager has not answered for this long, with no chief connected,
    # ends: a manager whose node hung stays Terminating and no garbage collector deletes
    # its pods, which would otherwise hold their GPUs for ever.
    orphan_timeout_s: float = 300.0
    delete_chief: bool = False  # the chief is kept for its logs unless asked
    lock_namespace: str = ""  # where the placement Lease lives (default: DEFAULT_LOCK_NAMESPACE)
    queue: str = ""  # a Kueue LocalQueue (--queue): each attempt is admitted by Kueue as one pod group
    priority_class: str = ""  # with queue: the Kueue WorkloadPriorityClass of the job's workloads
    manager_namespace: str = ""  # the manager pod's namespace (default: namespace)
    service_account: str = ""  # for job pods; empty = no API token mounted at all
    # Requests of a job pod are these times its GPUs, so it is never BestEffort (evicted
    # first) and passes a namespace's ResourceQuota or LimitRange that requires them.
    cpu_per_gpu_m: int = DEFAULT_CPU_PER_GPU_M  # CPU request per GPU, millicores
    memory_per_gpu_bytes: int = DEFAULT_MEMORY_PER_GPU_BYTES  # memory request and limit per GPU, bytes
    # /dev/shm of each job pod, bytes. None: the pod's memory limit. What a memory-backed
    # volume holds counts against that limit anyway, so a larger size would add nothing,
    # and the runtime's default of 64 MiB makes NCCL and TensorFlow fail or crawl.
    shm_size_bytes: int | None = None
    # A node whose GPU units share devices (time-slicing, MPS) or are MIG slices takes one
    # rank of the job at most (``gpusharing``): Horovod pins one device per local rank.
    # True (--allow-shared-gpus): any share there, for scripts that place ranks themselves.
    allow_shared_gpus: bool = False
    # Node label keys, outermost first (--topology): the plan spans the fewest domains at each
    # level, never more than one of a required level (``topology``). Empty: the network is flat.
    topology: tuple[Level, ...] = ()
    # Let a service mesh (Istio, Linkerd) inject its sidecar into job pods. Off: SSH and
    # Gloo between pod IPs are not traffic a mesh carries, and a sidecar keeps the chief's
    # pod Running after training.
    mesh_injection: bool = False
    # Isolate the job's network (``core.networkpolicy``): NetworkPolicies by which only the
    # job's own pods reach its pods, and its pods the manager's discovery port. Off: the
    # job's pods admit whatever the namespace's own policies admit.
    network_policy: bool = True
    # GPUs of the nodes the cluster's autoscaler adds (--scale-up-node-gpus). With
    # --wait-for-gpus, what free GPUs cannot hold becomes Pending pods of this size at
    # most, one per new node, which make the cluster grow (``core.scaleup``). 0: the job
    # waits for GPUs to free up, as without an autoscaler.
    scale_up_node_gpus: int = 0
    # The DeviceClass of GPUs a DRA driver publishes (--device-class): a node without
    # gpu_resource whose ResourceSlices hold devices of it offers those, and the job's pod
    # there claims its share of them (a ResourceClaimTemplate of this class). "": no DRA
    # GPUs (nothing of resource.k8s.io is read).
    device_class: str = ""
    # Who job pods run as (``core.podsecurity``): a UID, RUN_AS_AUTO or RUN_AS_PLATFORM; and
    # their group and fsGroup (None: the UID, or the platform's where it assigns the UID).
    run_as_user: int | str = RUN_AS_AUTO
    run_as_group: int | None = None
    # readOnlyRootFilesystem on job pods' containers, for clusters whose policies require it:
    # what the pod scripts write is on volumes. Off: training scripts write where they like.
    read_only_root_filesystem: bool = False
    # Pod knobs (docs/job-pods.md#pod-knobs). Secrets of the job's namespace the kubelet
    # pulls the job's image with (a private registry).
    image_pull_secrets: tuple[str, ...] = ()
    runtime_class: str = ""  # RuntimeClass of job pods (`nvidia` on k3s, RKE2, Talos); "": the node's default
    # PriorityClass (scheduling.k8s.io) of job pods and of submit's manager: its priority and
    # its preemption. Not --priority-class, Kueue's WorkloadPriorityClass, another object.
    pod_priority_class: str = ""
    termination_grace_period_s: float = TERMINATION_GRACE_S  # SIGTERM to SIGKILL: the ranks' time to save
    # How long job pods stay on a NotReady or unreachable node (their tolerationSeconds),
    # and how long the manager waits before it deletes them itself (``nodewatch``).
    node_lost_toleration_s: float = NODE_LOST_TOLERATION_S
    cpu_limit_per_gpu_m: int | None = None  # CPU limit per GPU, millicores; None: none (ranks use idle cores)
    memory_limit_per_gpu_bytes: int | None = None  # memory limit per GPU, bytes; None: the request
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
