"""The job's network isolation (--network-policy): its NetworkPolicies, created with its
Secret before the placement Lease is taken, so before any of its pods exists: no pod of
the job is ever reachable from outside it. Owned by the manager pod; deleted at teardown."""

from __future__ import annotations

from distributetrain.core import names
from distributetrain.core.pods import networkpolicy
from distributetrain.core.settings import JobSettings
from distributetrain.kube.api import KubeApi


def isolate(kube: KubeApi, settings: JobSettings) -> None:
    """Label the manager's own pod with its UID (what its policy selects), then create the policies."""
    policies = networkpolicy.job_policies(settings)
    if any(policy["metadata"]["name"] == names.manager_policy_name(settings.job_name) for policy in policies):
        kube.patch("Pod", settings.own_namespace, settings.job_name,
                   {"metadata": {"labels": networkpolicy.manager_label(settings)}})
    kube.create_all_owned(policies)
