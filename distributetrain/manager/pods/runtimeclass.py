"""The job's RuntimeClass (``--runtime-class``), read by the manager before it plans.

Admission adds what a RuntimeClass says to each pod that names it: its overhead
(``overhead.podFixed``, which the scheduler counts beside the containers' requests) and
its scheduling (nodeSelector and tolerations, merged into the pod's). The plan must know
them too, or it puts a share on a node whose room holds the containers but not the
overhead, or on a node the runtime is not installed on, where the pod stays Pending. So
the manager reads the RuntimeClass (``runtimeclasses: get``, rbac/clusterrole.yaml) and
plans with its terms (``JobSettings.runtime_class_terms``: ``podfit`` counts the
overhead, the inventory's candidates carry its labels and tolerate its taints).

A RuntimeClass that does not exist is bad input before anything is created. Without the
permission (an install from before the rule) the job is planned without the terms, as
before, and the server-side dry run still refuses a RuntimeClass that does not exist.
"""

from __future__ import annotations

import logging

from distributetrain.core import errors
from distributetrain.core.pods import podknobs
from distributetrain.core.settings import JobSettings
from distributetrain.kube.api import KubeApi

log = logging.getLogger(__name__)

FLAG = "--runtime-class"


def with_runtime_class(kube: KubeApi, settings: JobSettings, strict: bool = True) -> JobSettings:
    """``settings`` with the terms of its RuntimeClass. ``strict``: a missing RuntimeClass,
    or one whose scheduling conflicts with --node-selector, is bad input; else (a job
    whose pods exist already) it is logged and the job goes on with what it has."""
    name = settings.runtime_class
    if not name:
        return settings
    try:
        found = kube.read("RuntimeClass", None, name)
    except errors.Forbidden as e:
        log.warning("job %s: cannot read RuntimeClass %s (%s; rbac/clusterrole.yaml grants runtimeclasses get): "
                    "planning without its overhead and scheduling", settings.job_name, name, e)
        return settings
    problem = None
    if found is None:
        problem = errors.UsageError(FLAG, f"no RuntimeClass {name!r} in the cluster (kubectl get runtimeclass "
                                          "lists them)")
    else:
        terms = podknobs.runtime_class_terms(found)
        if conflict := podknobs.selector_conflict(terms, settings):
            problem = errors.UsageError("--node-selector", f"RuntimeClass {name!r} runs pods only on nodes "
                                                           f"labelled otherwise: {conflict}")
        else:
            return settings.replace(runtime_class_terms=terms)
    if strict:
        raise problem
    log.warning("job %s: %s; going on with the pods the job has", settings.job_name, problem)
    return settings
