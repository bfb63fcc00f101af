"""The pod knobs a platform needs set (docs/job-pods.md#pod-knobs): their fields in every
job pod, and what an admission refusal of one of them tells the user to change.

Each knob is the user's value, written as it is: ``imagePullSecrets`` (a private
registry), ``runtimeClassName`` (``nvidia`` where the NVIDIA runtime is not the node's
default: k3s, RKE2, Talos), ``priorityClassName``, and ``nodeSelector``, the labels of
``--node-selector`` (GKE Autopilot's admission requires ``cloud.google.com/gke-accelerator``
there, not in node affinity). Workers, the chief, pods for new nodes and queued pods all
carry them: they are built by one function (``manifests``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from distributetrain.core.settings import JobSettings, RuntimeClassTerms

# The API server's words when a knob names an object that is not there, or limits do not
# fit: the RuntimeClass and Priority admission plugins (403), and validation (422) of a
# request above the limit a namespace's LimitRange gave the container.
_REFUSALS = (
    (re.compile(r'RuntimeClass "[^"]*" not found'), "--runtime-class",
     "no RuntimeClass {runtime_class!r} in the cluster (kubectl get runtimeclass lists them)"),
    (re.compile(r"conflict: runtimeClass\.scheduling\.nodeSelector"), "--node-selector",
     "RuntimeClass {runtime_class!r} requires other node labels than --node-selector: {message}"),
    (re.compile(r"no PriorityClass with name \S+ was found"), "--pod-priority-class",
     "no PriorityClass {pod_priority_class!r} in the cluster (kubectl get priorityclass lists them)"),
    (re.compile(r"must be less than or equal to cpu limit"), "--cpu-limit-per-gpu",
     "a LimitRange of the namespace gives job pods a CPU limit below their request (--cpu-per-gpu times "
     "their GPUs): set --cpu-limit-per-gpu to at least --cpu-per-gpu, or lower --cpu-per-gpu ({message})"),
)


def spec_fields(settings: JobSettings) -> dict:
    """The knobs' fields of a job pod's spec: only those the user set."""
    fields: dict = {}
    if settings.node_selector:
        fields["nodeSelector"] = dict(settings.node_selector)
    if settings.image_pull_secrets:
        fields["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    if settings.runtime_class:
        fields["runtimeClassName"] = settings.runtime_class
    if settings.pod_priority_class:
        fields["priorityClassName"] = settings.pod_priority_class
    return fields


def refused_knob(message: str, settings: JobSettings) -> tuple[str, str] | None:
    """The flag to change and why, when the API server refused a job pod for a knob; else None."""
    for pattern, flag, why in _REFUSALS:
        if pattern.search(message):
            return flag, why.format(runtime_class=settings.runtime_class,
                                    pod_priority_class=settings.pod_priority_class, message=message)
    return None


def runtime_class_terms(runtime_class: Mapping) -> RuntimeClassTerms:
    """What a RuntimeClass (node.k8s.io/v1) adds to each pod that names it: its overhead
    (``overhead.podFixed``) and its ``scheduling`` (nodeSelector, tolerations)."""
    overhead = ((runtime_class.get("overhead") or {}).get("podFixed") or {})
    scheduling = runtime_class.get("scheduling") or {}
    return RuntimeClassTerms(
        overhead=tuple(sorted((resource, str(amount)) for resource, amount in overhead.items())),
        node_selector=tuple(sorted((scheduling.get("nodeSelector") or {}).items())),
        tolerations=tuple(dict(toleration) for toleration in scheduling.get("tolerations") or ()),
    )


def selector_conflict(terms: RuntimeClassTerms, settings: JobSettings) -> str | None:
    """A label --node-selector wants other than the RuntimeClass's scheduling requires (the
    RuntimeClass admission plugin refuses such pods), as "key=ours (RuntimeClass: theirs)"."""
    required = dict(terms.node_selector)
    conflicts = [f"{key}={value} (RuntimeClass: {required[key]})" for key, value in settings.node_selector
                 if key in required and required[key] != value]
    return ", ".join(conflicts) or None
