"""The job's fields, declared once: flag, parser (its validation), format, help.

Everything else is made from this table: the argparse flags (``cli.jobflags``), the
manager's arguments that ``submit`` writes (``to_args``), and the JSON form the manager
records on its own pod (``to_json``, ``from_json``), which ``status`` and ``list`` read.
Each field is described once: here, by its flag's help (``JobSettings`` says only units,
special values and why). Defaults live in ``JobSettings`` alone; a flag's default text is
that value formatted back. Adding a flag is one entry here and its field in ``JobSettings`` (tests hold the
two, and the flag table of docs/flags.md, together).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from distributetrain.core import errors, names, quantity, validation
from distributetrain.core.pods import manifests, podsecurity
from distributetrain.core.placement import topology
from distributetrain.core.settings import (DEFAULT_LOCK_NAMESPACE, ELASTIC_MIN_GPUS, JobSettings, Level, PvcMount,
                                          RuntimeClassTerms)

NO_DEFAULT = dataclasses.MISSING
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(JobSettings)}


def _frozen(value: Any) -> Any:
    """A JSON value as JobSettings holds it: lists become tuples (dicts stay dicts)."""
    return tuple(_frozen(item) for item in value) if isinstance(value, list) else value


@dataclass(frozen=True)
class Field:
    name: str  # the JobSettings field (its name carries the unit: _s, _m, _bytes)
    flag: str = ""  # "": none (set from the manager pod's environment, or after `--`)
    parse: Callable[[str], Any] = str  # one flag value -> the field's value (or item); ValueError shows the valid form
    format: Callable[[Any], str] = str  # the value (or item) -> the text ``parse`` reads back
    metavar: str | None = None  # as in the flag table of docs/flags.md
    help: str = ""
    default_help: str = ""  # a default that is no value of the field ("the manager's own"); empty text means it too
    repeat: bool = False  # repeatable: the value is the tuple of every given item
    separator: str = ""  # with repeat: one flag value may hold several items
    switch: bool = False  # no value: given means True
    bare: str | None = None  # the value of the flag given alone (``--host-network``)
    required: bool = False
    always_written: bool = False  # in the manager's arguments even at its default: manager.yaml shows these
    identity: bool = False  # the manager pod's own (downward API): never written into its arguments
    stored: bool = True  # False: an input only, read back from other fields (``--elastic``)
    from_json: Callable[[Any], Any] = _frozen

    @property
    def default(self) -> Any:
        return _DEFAULTS.get(self.name, NO_DEFAULT) if self.stored else False

    @property
    def default_text(self) -> str:
        """The default as --help and docs/flags.md say it ("" when there is none)."""
        if self.default_help or self.switch or self.repeat or self.default in ("", None, NO_DEFAULT):
            return self.default_help
        return self.format(self.default)

    def unset(self, text: Any) -> bool:
        """Not given: absent, or empty where the default is no value."""
        if self.switch or self.repeat:
            return not text
        return text is None or (text == "" and (self.default in ("", None) or bool(self.default_help)))


def _job_name(text: str) -> str:
    return validation.dns_label(text, names.MAX_JOB_NAME_LENGTH)


def _pvc(text: str) -> PvcMount:
    pvc = PvcMount(*validation.pvc_mount(text))
    if pvc.mount_path.rstrip("/") == manifests.SCRATCH_PATH:
        raise ValueError(f"{manifests.SCRATCH_PATH} is the job's own scratch volume, got {pvc.claim}:{pvc.mount_path}")
    if pvc.mount_path.rstrip("/") == manifests.SHM_PATH:
        raise ValueError(f"{manifests.SHM_PATH} is the job's own memory-backed volume (size it with --shm-size), "
                         f"got {pvc.claim}:{pvc.mount_path}")
    return pvc


def _format_pvc(pvc: PvcMount) -> str:
    return f"{pvc.claim}:{pvc.mount_path}{':ro' if pvc.read_only else ''}"


def _pair(pair: tuple[str, str]) -> str:
    return f"{pair[0]}={pair[1]}"


def _duration(**options) -> dict:
    return {"parse": validation.duration_s, "format": validation.format_duration, "metavar": "D", **options}


FIELDS: tuple[Field, ...] = (
    Field("num_gpus", "--num-gpus", validation.positive_int, metavar="N", required=True, always_written=True,
          help="GPUs in all (= Horovod processes)"),
    Field("image", "--image", validation.image, metavar="IMAGE", required=True, always_written=True,
          help="training image (base_image/)"),
    Field("port", "--port", validation.port, metavar="PORT", always_written=True, help="workers' sshd port"),
    Field("filename", "--filename", validation.absolute_path, metavar="PATH", always_written=True,
          help="training script"),
    Field("host_network", "--host-network", validation.boolean, lambda on: str(on).lower(), metavar="true|false",
          bare="true", always_written=True, help="run job pods on the node's network"),
    Field("namespace", "--namespace", validation.dns_label, metavar="NS", identity=True,
          default_help="the manager's", help="namespace of the job"),
    Field("job_name", "--job-name", _job_name, metavar="NAME", identity=True, default_help="$MANAGER_POD_NAME",
          help="job name (the manager pod's name)"),
    Field("owner_uid", "--owner-uid", metavar="UID", identity=True, default_help="$MANAGER_POD_UID",
          help="uid owning the job's objects"),
    Field("gpu_resource", "--gpu-resource", validation.resource_name, metavar="NAME",
          help="extended resource of the GPUs"),
    Field("device_class", "--device-class", validation.dns_subdomain, metavar="NAME",
          help="DeviceClass of the GPUs a DRA driver publishes (ResourceSlices): on a node without --gpu-resource, "
               "the job's pod claims its share of them through a ResourceClaim of this class"),
    Field("node_selector", "--node-selector", validation.key_value, _pair, metavar="K=V[,K=V]", repeat=True,
          separator=",", help="only nodes with these labels"),
    Field("tolerations", "--toleration", validation.toleration, validation.format_toleration,
          metavar="KEY[=VALUE][:EFFECT]", repeat=True, help="taint the job's pods tolerate (repeatable)"),
    Field("env", "--env", validation.env_var, _pair, metavar="NAME=VALUE", repeat=True,
          help="environment of the training script (repeatable; visible in the manager's arguments: never for "
               "credentials)"),
    Field("env_from_secrets", "--env-from-secret", validation.dns_subdomain, metavar="NAME", repeat=True,
          help="Secret in the job's namespace whose keys become the training script's environment (repeatable; "
               "for credentials)"),
    Field("pvcs", "--pvc", _pvc, _format_pvc, metavar="CLAIM:/PATH[:ro]", repeat=True,
          help="PersistentVolumeClaim mounted in every job pod (repeatable)",
          from_json=lambda pvcs: tuple(PvcMount(**pvc) for pvc in pvcs)),
    Field("worker_ready_timeout_s", "--worker-ready-timeout", **_duration(
        help="release and re-plan if workers are not Ready by then")),
    Field("image_pull_timeout_s", "--image-pull-timeout", **_duration(
        parse=validation.positive_duration_s,
        help="bound of one image pull of a job pod, which does not count against --worker-ready-timeout")),
    Field("scale_up_timeout_s", "--scale-up-timeout", **_duration(
        parse=validation.positive_duration_s,
        help="bound of a job pod's wait for a node an autoscaler launches for it, which does not count against "
             "--worker-ready-timeout")),
    Field("active_deadline_s", "--active-deadline", **_duration(help="deadline of the whole job")),
    Field("orphan_timeout_s", "--orphan-timeout", **_duration(
        parse=validation.positive_duration_s,
        help="a worker whose manager has not answered for this long ends once no chief is connected, freeing "
             "its GPUs")),
    Field("wait_for_gpus_s", "--wait-for-gpus", **_duration(
        help="wait this long for free GPUs instead of failing at once")),
    Field("scale_up_node_gpus", "--scale-up-node-gpus", validation.non_negative_int, metavar="N",
          help="GPUs of the nodes the cluster's autoscaler adds: with --wait-for-gpus, what free GPUs cannot hold "
               "becomes Pending pods of at most N GPUs, one per new node, so the cluster grows (0: wait for free "
               "GPUs)"),
    Field("ssh_connect_attempts", "--ssh-attempts", validation.positive_int, metavar="N",
          help="chief's SSH checks per worker"),
    Field("delete_chief", "--delete-chief", switch=True, help="delete the chief too when it finishes"),
    Field("allow_shared_gpus", "--allow-shared-gpus", switch=True,
          help="let a node whose GPUs are time-sliced, shared by MPS or MIG slices take more than one rank of the "
               "job (by default one: Horovod pins one device per local rank)"),
    Field("max_restarts", "--max-restarts", validation.non_negative_int, metavar="N",
          help="start the job again (re-planned, fresh pods) up to N times when a pod is lost for a reason "
               "outside the training script"),
    Field("elastic", "--elastic", switch=True, stored=False,
          help="elastic Horovod: a lost worker does not end the job, which goes on while --min-gpus remain and "
               "grows back as GPUs free up"),
    Field("min_gpus", "--min-gpus", validation.positive_int, metavar="M", default_help=str(ELASTIC_MIN_GPUS),
          help="with --elastic: fewest GPUs to train on"),
    Field("elastic_timeout_s", "--elastic-timeout", **_duration(
        metavar="DURATION", help="with --elastic: how long to wait for --min-gpus after a loss before failing")),
    Field("gloo_timeout_s", "--gloo-timeout", **_duration(
        parse=validation.positive_duration_s, metavar="DURATION",
        help="how long ranks wait for a peer (Horovod's Gloo timeout): at the start, the time the slowest rank "
             "has to import TensorFlow; with --elastic, also what a lost peer costs the others before the world "
             "is reshaped")),
    Field("queue", "--queue", validation.dns_label, metavar="LOCALQUEUE",
          help="a Kueue LocalQueue of the job's namespace: each attempt waits there and is admitted all or "
               "nothing against its quota"),
    Field("priority_class", "--priority-class", validation.dns_subdomain, metavar="NAME",
          help="with --queue: a Kueue WorkloadPriorityClass for the job's workload, which may preempt workloads "
               "of lower priority"),
    Field("lock_namespace", "--lock-namespace", validation.dns_label, metavar="NS",
          default_help=DEFAULT_LOCK_NAMESPACE,
          help="namespace of the placement Lease, shared by every manager that plans on the same GPUs"),
    Field("service_account", "--service-account", metavar="NAME", help="ServiceAccount of job pods"),
    Field("cpu_per_gpu_m", "--cpu-per-gpu", quantity.cpu_millis, quantity.format_cpu, metavar="CPU",
          help="CPU request of a job pod per GPU it has"),
    Field("memory_per_gpu_bytes", "--memory-per-gpu", quantity.memory_bytes, quantity.format_memory,
          metavar="MEMORY", help="memory request and limit of a job pod per GPU it has"),
    Field("shm_size_bytes", "--shm-size", quantity.memory_bytes, quantity.format_memory, metavar="MEMORY",
          default_help="the pod's memory limit", help="size of /dev/shm in every job pod"),
    Field("topology", "--topology", topology.parse, topology.format_levels, metavar="LEVEL[!][,LEVEL[!]]",
          default_help="none (a flat network)",
          help="node label keys of the network's levels, outermost first (e.g. network.topology.kubernetes.io/block,"
               "network.topology.kubernetes.io/rack): the fewest domains at each level; LEVEL! the job never crosses",
          from_json=lambda levels: tuple(Level(**level) for level in levels)),
    Field("mesh_injection", "--mesh-injection", validation.boolean, lambda on: str(on).lower(), metavar="true|false",
          bare="true", help="let a service mesh (Istio, Linkerd) inject its sidecar into job pods"),
    Field("network_policy", "--network-policy", validation.boolean, lambda on: str(on).lower(), metavar="true|false",
          bare="true", help="NetworkPolicies by which only the job's own pods reach its pods, and they the manager"),
    Field("run_as_user", "--run-as-user", podsecurity.run_as_user, metavar="UID|auto|platform",
          help="user of job pods: a UID (an existing volume's owner, say); auto: 1000, or the platform's where "
               "the namespace says it assigns UIDs (OpenShift); platform: none, the platform assigns it"),
    Field("run_as_group", "--run-as-group", podsecurity.group_id, metavar="GID", default_help="the user's UID",
          help="primary group and fsGroup of job pods"),
    Field("read_only_root_filesystem", "--read-only-root-filesystem", validation.boolean, lambda on: str(on).lower(),
          metavar="true|false", bare="true",
          help="job pods' containers on a read-only root filesystem (the training script then writes to /tmp, "
               "$HOME, /dev/shm and volumes only)"),
    # Pod knobs (docs/job-pods.md#pod-knobs).
    Field("image_pull_secrets", "--image-pull-secret", validation.dns_subdomain, metavar="NAME", repeat=True,
          help="Secret of the job's namespace (kubernetes.io/dockerconfigjson) the job's image is pulled with "
               "(repeatable; a private registry)"),
    Field("runtime_class", "--runtime-class", validation.dns_subdomain, metavar="NAME",
          help="RuntimeClass of job pods (e.g. nvidia on k3s, RKE2, Talos)"),
    Field("pod_priority_class", "--pod-priority-class", validation.dns_subdomain, metavar="NAME",
          help="PriorityClass of job pods and of submit's manager (not Kueue's --priority-class)"),
    Field("termination_grace_period_s", "--termination-grace-period", **_duration(
        parse=validation.whole_seconds,
        help="grace period of job pods: SIGTERM, then this long for the ranks to save their work")),
    Field("node_lost_toleration_s", "--node-lost-toleration", **_duration(
        parse=validation.whole_seconds,
        help="how long job pods stay on a NotReady or unreachable node before they are lost (evicted, or "
             "deleted by the manager)")),
    Field("cpu_limit_per_gpu_m", "--cpu-limit-per-gpu", quantity.cpu_millis, quantity.format_cpu, metavar="CPU",
          help="CPU limit of a job pod per GPU it has, at least --cpu-per-gpu (default: no limit)"),
    Field("memory_limit_per_gpu_bytes", "--memory-limit-per-gpu", quantity.memory_bytes, quantity.format_memory,
          metavar="MEMORY", default_help="the memory request",
          help="memory limit of a job pod per GPU it has, at least --memory-per-gpu"),
    # Set from the manager pod's environment (downward API) or after `--`: no flag.
    Field("manager_namespace"),
    Field("discovery_url"),
    Field("script_args", repeat=True),
    # Read from the cluster by the manager (``manager.pods.runtimeclass``): no flag.
    Field("runtime_class_terms", from_json=lambda terms: RuntimeClassTerms(
        **{key: _frozen(value) for key, value in terms.items()})),
)
FLAGS = tuple(field for field in FIELDS if field.flag)
BY_NAME = {field.name: field for field in FIELDS}


def _items(field: Field, texts: list[str]) -> list[str]:
    """A repeatable flag's items: each text, or with a separator each of their non-empty parts."""
    if not field.separator:
        return list(texts)
    return [item for text in texts for item in text.split(field.separator) if item]


def parse_given(texts: Mapping[str, Any]) -> dict[str, Any]:
    """The values of the flags given, by field name, from their texts (a list of texts for
    a repeatable flag, a bool for a switch); the first bad one raises UsageError naming it."""
    given = {}
    for field in FLAGS:
        text = texts.get(field.name)
        if field.unset(text):
            continue
        if field.switch:
            given[field.name] = True
        elif field.repeat:
            given[field.name] = tuple(validation.checked(field.flag, field.parse, item) for item in _items(field, text))
        else:
            given[field.name] = validation.checked(field.flag, field.parse, text)
    return given


def _value(given: Mapping[str, Any], name: str) -> Any:
    return given[name] if name in given else BY_NAME[name].default


def _check_port(given: Mapping[str, Any]) -> None:
    port = _value(given, "port")
    if port < validation.FIRST_UNPRIVILEGED_PORT:
        raise errors.UsageError("--port", f"must be {validation.FIRST_UNPRIVILEGED_PORT} to {validation.MAX_PORT} "
                                          f"(the workers' sshd runs as a non-root user, with no capability to bind "
                                          f"a privileged port), got {port}")


def _min_gpus(given: Mapping[str, Any]) -> int:
    """``--min-gpus`` of an ``--elastic`` job, 0 for a static one."""
    if not given.get("elastic"):
        if "min_gpus" in given:
            raise errors.UsageError("--min-gpus", "only applies with --elastic")
        return 0
    num_gpus = given["num_gpus"]
    if num_gpus < 2:
        raise errors.UsageError("--elastic", f"needs --num-gpus 2 or more (one GPU cannot shrink), got {num_gpus}")
    min_gpus = given.get("min_gpus", ELASTIC_MIN_GPUS)
    if min_gpus > num_gpus:
        raise errors.UsageError("--min-gpus", f"must be 1 to --num-gpus ({num_gpus}), got {min_gpus}")
    return min_gpus


def _check_queue(given: Mapping[str, Any]) -> None:
    """``--queue`` never with ``--elastic`` (Kueue admits a pod group as a whole, and a group
    does not grow or shrink) nor ``--device-class``; ``--priority-class`` only with a queue, which alone reads it."""
    if "queue" in given and given.get("elastic"):
        raise errors.UsageError("--queue", "cannot be used with --elastic: Kueue admits a job's pods as one group "
                                           "of a fixed size")
    if "priority_class" in given and "queue" not in given:
        raise errors.UsageError("--priority-class", "only applies with --queue (a Kueue WorkloadPriorityClass)")
    if "queue" in given and given.get("device_class"):
        # A queued pod's request is fixed before Kueue picks its node: it asks for --gpu-resource.
        raise errors.UsageError("--device-class", "cannot be used with --queue: queued pods request --gpu-resource")


def _check_scale_up(given: Mapping[str, Any]) -> None:
    """``--scale-up-node-gpus`` only for a job that may wait (a node takes minutes to join),
    outside Kueue (its ProvisioningRequest admission check grows the cluster for a queued
    job) and static (an elastic job grows back on whatever GPUs free up)."""
    if not given.get("scale_up_node_gpus"):
        return
    if not given.get("wait_for_gpus_s"):
        raise errors.UsageError("--scale-up-node-gpus", "only applies with --wait-for-gpus (new nodes take minutes "
                                                        "to join)")
    for other, why in (("queue", "--queue: Kueue's ProvisioningRequest admission check grows the cluster"),
                       ("elastic", "--elastic")):
        if given.get(other):
            raise errors.UsageError("--scale-up-node-gpus", f"cannot be used with {why}")


def _check_limits(given: Mapping[str, Any]) -> None:
    """A limit below its request makes every job pod invalid."""
    for limit, request, form in (("cpu_limit_per_gpu_m", "cpu_per_gpu_m", quantity.format_cpu),
                                 ("memory_limit_per_gpu_bytes", "memory_per_gpu_bytes", quantity.format_memory)):
        if limit in given and given[limit] < _value(given, request):
            raise errors.UsageError(BY_NAME[limit].flag, f"must be at least {BY_NAME[request].flag} "
                                                         f"({form(_value(given, request))}), got {form(given[limit])}")


def settings(given: Mapping[str, Any], **unflagged: Any) -> JobSettings:
    """JobSettings from the flags given (``parse_given``), after the rules between flags;
    ``unflagged``: the fields without a flag."""
    _check_port(given)
    values = {**given, "min_gpus": _min_gpus(given), **unflagged}
    _check_queue(given)
    _check_scale_up(given)
    _check_limits(given)
    values.pop("elastic", None)
    return JobSettings(**values)


def from_texts(texts: Mapping[str, Any], **unflagged: Any) -> JobSettings:
    """JobSettings from what was typed for each flag (``parse_given``), after the rules
    between flags (``settings``); ``unflagged``: the fields without a flag."""
    return settings(parse_given(texts), **unflagged)


def _written(field: Field, value: Any) -> list[str]:
    if field.switch:
        return [field.flag] if value else []
    if field.repeat and field.separator:
        return [f"{field.flag}={field.separator.join(map(field.format, value))}"] if value else []
    if field.repeat:
        return [f"{field.flag}={field.format(item)}" for item in value]
    if value == field.default and not field.always_written:
        return []
    return [f"{field.flag}={field.format(value)}"]


def to_args(job: JobSettings) -> list[str]:
    """The flags that ``parse_given`` reads back as ``job``: those not at their default (and
    the few manager.yaml always shows), then ``--`` and the script's arguments. The
    manager pod's identity is left to its downward API."""
    args = [arg for field in FLAGS if not field.identity
            for arg in _written(field, getattr(job, field.name))]
    return [*args, "--", *job.script_args] if job.script_args else args


def _jsonable(value: Any) -> Any:
    if isinstance(value, RuntimeClassTerms):
        return {key: _jsonable(item) for key, item in dataclasses.asdict(value).items()}
    if isinstance(value, (PvcMount, Level)):
        return dataclasses.asdict(value)
    if isinstance(value, tuple):
        return [_jsonable(item) for item in value]
    return value


def to_json(job: JobSettings) -> str:
    """The stored form: every field by name, in JSON's own types."""
    return json.dumps({field.name: _jsonable(getattr(job, field.name)) for field in FIELDS if field.stored},
                      separators=(",", ":"))


def from_json(text: str) -> JobSettings:
    """``to_json``'s settings. Fields unknown here (a newer release's) are skipped, missing
    ones take their default; anything else that does not fit raises ValueError."""
    try:
        stored = json.loads(text)
        return JobSettings(**{field.name: field.from_json(stored[field.name]) for field in FIELDS
                              if field.stored and field.name in stored})
    except (TypeError, AttributeError, KeyError) as e:
        raise ValueError(f"not a job spec: {e}") from None
