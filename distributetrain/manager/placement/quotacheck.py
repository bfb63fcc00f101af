"""Before anything is created: a ResourceQuota that could never hold the job is bad input.

The rule is ``core.placement.quotas``; this reads the job namespace's quotas. Reading them is the
Role's optional ``resourcequotas: list``: without it the check is skipped, and a quota
that refuses the job's pods at creation ends the job with exit 73 (with
``--wait-for-gpus``, once the wait for it is over: ``quotawait``).
"""

from __future__ import annotations

import logging

from distributetrain.core import errors
from distributetrain.core.placement import quotas
from distributetrain.core.settings import JobSettings
from distributetrain.kube.client import Kube

log = logging.getLogger(__name__)


def check_quotas(kube: Kube, settings: JobSettings) -> None:
    """Raise UsageError, naming the flag, if a quota's hard limit is below the whole job."""
    try:
        found = kube.list_all("ResourceQuota", settings.namespace)[0]
    except errors.Forbidden as e:
        log.warning("job %s: ResourceQuotas are not checked (%s; rbac/role.yaml grants resourcequotas list)",
                    settings.job_name, e)
        return
    exceeded = quotas.exceeded(found, settings)
    if exceeded:
        raise errors.UsageError(exceeded.flag, f"{exceeded} in namespace {settings.namespace!r}: it can never admit "
                                               "the job")
