"""The Secrets a job's environment comes from (``--env-from-secret``).

A pod whose envFrom names a missing Secret is created all the same and then never
starts (CreateContainerConfigError), after the workers took their GPUs. So the manager
checks that each exists before it creates anything, and a missing one is bad input.
"""

from __future__ import annotations

from distributetrain.core import errors
from distributetrain.core.settings import JobSettings

FLAG = "--env-from-secret"


def require_env_secrets(kube, settings: JobSettings) -> None:
    """Raise UsageError naming the first Secret of ``--env-from-secret`` not in the job's namespace."""
    for name in settings.env_from_secrets:
        if kube.read("Secret", settings.namespace, name) is None:
            raise errors.UsageError(
                FLAG, f"no Secret {name!r} in namespace {settings.namespace!r} (create it there first, e.g. "
                      f"kubectl create secret generic {name} -n {settings.namespace} --from-literal=KEY=value)")
