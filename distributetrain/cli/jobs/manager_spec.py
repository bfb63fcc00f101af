"""Pure builders of the manager: the Pod of manager.yaml, or the batch/v1 Job of
manager-job.yaml, for validated settings.

The job flags are written from the validated ``JobSettings`` by the job's table (not
copied from the command line), so what the manager parses is exactly what the CLI checked. No API
calls: tests compare whole objects, and against the YAML files users apply by hand.
"""

from __future__ import annotations

import copy
import secrets
import string
from dataclasses import dataclass

from distributetrain.cli import jobflags
from distributetrain.core.job import jobspec
from distributetrain.core.pods import manifests, podgroup, podsecurity
from distributetrain.core import names
from distributetrain.core.settings import JobSettings
from distributetrain.manager.pods import discovery

DEFAULT_MANAGER_IMAGE = "distributetrain/manager:0.1.0"
DEFAULT_MANAGER_SERVICE_ACCOUNT = "distributetrain-manager"  # rbac/serviceaccount.yaml
DEFAULT_JOB_TTL_S = 24 * 3600  # a finished Job (and so its chief's logs) stays a day
MANAGER_CONTAINER = "manager"
MANAGER_COMMAND = "manager.sh"  # manager_image/manager.sh: pre-training, then post-training
MANAGER_TERMINATION_GRACE_S = 60  # teardown on deletion needs a few seconds of API calls
MANAGER_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
QUEUED_MANAGER_REQUESTS = {"cpu": "0", "memory": "0"}  # see in_queue
# The manager is never restarted elsewhere: evicted, its job fails whatever --max-restarts
# says. So neither the cluster autoscaler nor Karpenter may evict it to scale down or
# consolidate its node (docs/manager-pdb.yaml covers kubectl drain).
# And no service mesh injects a sidecar into it: rbac/manager-admission-policy.yaml admits
# the manager's ServiceAccount with one container, the manager's.
MANAGER_ANNOTATIONS = {**names.NO_DISRUPTION_ANNOTATIONS, **manifests.MESH_OPT_OUT_ANNOTATIONS}
# The Job controller names its pod "<job>-<5 random characters>", and that pod's name is
# the job name the manager uses: it must stay within names.MAX_JOB_NAME_LENGTH.
JOB_POD_SUFFIX_CHARS = 6
GENERATED_NAME_PREFIX = "dt-"
GENERATED_NAME_RANDOM_CHARS = 6
_NAME_ALPHABET = string.ascii_lowercase + string.digits

@dataclass(frozen=True)
class ManagerOptions:
    """How the manager itself runs (not the job it runs)."""

    image: str = DEFAULT_MANAGER_IMAGE
    service_account: str = DEFAULT_MANAGER_SERVICE_ACCOUNT  # bound by rbac/
    as_job: bool = False  # wrap the pod in a batch/v1 Job
    ttl_after_finished_s: int = DEFAULT_JOB_TTL_S  # as a Job: delete it (and so the job) this long after it ends
    node_selector: tuple[tuple[str, str], ...] = ()  # where the manager runs, e.g. CPU nodes (it needs no GPU)


def generated_name() -> str:
    return GENERATED_NAME_PREFIX + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(GENERATED_NAME_RANDOM_CHARS))


def max_name_length(as_job: bool) -> int:
    return names.MAX_JOB_NAME_LENGTH - (JOB_POD_SUFFIX_CHARS if as_job else 0)


def manager_labels(name: str) -> dict[str, str]:
    return {names.LABEL_APP: names.APP, names.LABEL_ROLE: names.ROLE_MANAGER, names.LABEL_JOB: name}


def _downward(variable: str, field_path: str) -> dict:
    return {"name": variable, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def manager_pod_spec(settings: JobSettings, options: ManagerOptions) -> dict:
    spec = {
        "serviceAccountName": options.service_account,
        # The manager's exit code is the job's outcome: never restart it.
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": MANAGER_TERMINATION_GRACE_S,
        # PodSecurity `restricted` as job pods, under the image's numeric USER (65532), or
        # the UID the platform assigns (OpenShift refuses any other): the manager needs
        # no /etc/passwd entry, and writes nothing but to the API.
        "securityContext": podsecurity.pod_security_context(),
        "containers": [
            {
                "name": MANAGER_CONTAINER,
                "image": options.image,
                "command": [MANAGER_COMMAND],
                "args": jobspec.to_args(settings),
                # The job's name, namespace and owner come from the manager pod itself.
                "env": [
                    _downward(jobflags.ENV_POD_NAME, "metadata.name"),
                    _downward(jobflags.ENV_POD_NAMESPACE, "metadata.namespace"),
                    _downward(jobflags.ENV_POD_UID, "metadata.uid"),
                    # An elastic job's chief asks this address for its hosts.
                    _downward(jobflags.ENV_POD_IP, "status.podIP"),
                ],
                "ports": [{"name": "discovery", "containerPort": discovery.DISCOVERY_PORT, "protocol": "TCP"}],
                "resources": {kind: dict(amounts) for kind, amounts in MANAGER_RESOURCES.items()},
                "securityContext": podsecurity.container_security_context(read_only_root=True),
            }
        ],
    }
    if options.node_selector:
        spec["nodeSelector"] = dict(options.node_selector)
    if settings.image_pull_secrets:
        # A private registry of the job's image is most likely the manager image's too.
        spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    if settings.pod_priority_class:
        # The job's priority: preempted, the manager ends its job as surely as a lost worker.
        spec["priorityClassName"] = settings.pod_priority_class
    return spec


def _metadata(settings: JobSettings) -> dict:
    return {"name": settings.job_name, "namespace": settings.namespace, "labels": manager_labels(settings.job_name)}


def manager_pod(settings: JobSettings, options: ManagerOptions) -> dict:
    metadata = _metadata(settings) | {"annotations": dict(MANAGER_ANNOTATIONS)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": manager_pod_spec(settings, options)}


def manager_job(settings: JobSettings, options: ManagerOptions) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(settings),
        "spec": {
            # One attempt: a second manager would plan the job again from scratch.
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": options.ttl_after_finished_s,
            "template": {
                "metadata": {"labels": manager_labels(settings.job_name), "annotations": dict(MANAGER_ANNOTATIONS)},
                "spec": manager_pod_spec(settings, options),
            },
        },
    }


def in_queue(manager: dict, queue: str) -> dict:
    """The manager (a Pod, or a Job's pod template) for a namespace where Kueue queues every
    pod, queue name or not (``manageJobsWithoutQueueName``): in the job's queue, as a
    workload of its own that asks for no quota (requests of 0), so managers waiting for
    their jobs never hold quota those jobs wait for, and never count against GPUs."""
    queued = copy.deepcopy(manager)
    queued["metadata"]["labels"][podgroup.QUEUE_LABEL] = queue
    pod = queued
    if queued["kind"] == "Job":  # Kueue's Job integration reads the Job's label, its Pod one the pod's
        pod = queued["spec"]["template"]
        pod["metadata"]["labels"][podgroup.QUEUE_LABEL] = queue
    for container in pod["spec"]["containers"]:
        container["resources"]["requests"] = dict(QUEUED_MANAGER_REQUESTS)
    return queued


def manager_object(settings: JobSettings, options: ManagerOptions) -> dict:
    return manager_job(settings, options) if options.as_job else manager_pod(settings, options)
