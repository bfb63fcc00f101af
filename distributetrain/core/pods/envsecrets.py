"""The Secrets a job's environment comes from (``--env-from-secret``).

A pod whose envFrom names a missing Secret is created all the same and then never
starts (CreateContainerConfigError), after the workers took their GPUs. So the manager
checks that each exists before it creates anything (``manager/pods/podchecks``), and a
missing one is bad input.
"""

from __future__ import annotations

from distributetrain.core import errors

FLAG = "--env-from-secret"


def missing_secret(name: str, namespace: str) -> errors.UsageError:
    """The bad input of a ``--env-from-secret`` Secret ``name`` not in the job's ``namespace``."""
    return errors.UsageError(
        FLAG, f"no Secret {name!r} in namespace {namespace!r} (create it there first, e.g. "
              f"kubectl create secret generic {name} -n {namespace} --from-literal=KEY=value)")
