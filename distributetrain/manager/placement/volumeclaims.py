"""The job's PersistentVolumeClaims (``--pvc``), read from the API for the plan
(``core.placement.volumeclaims``): each claim, its PersistentVolume or StorageClass, and the pods
of the job's namespace that mount its one-node claims now.

Read afresh by every booking (``booking.take_inventory``, under the placement Lease: a
claim binds, and pods that mount it come and go), by ``submit`` with the user's
credentials, and before the job plans at all: a claim that does not exist or that no pod
can mount is bad input, and one that is not bound yet is waited for, as its pods would be.

Reading them is granted by rbac/ (``persistentvolumeclaims``, ``persistentvolumes`` and
``storageclasses``: get), and required of a job with ``--pvc``: a manager that may not read
them exits 77 before it creates anything, rather than pin pods where they could never
start. ``submit`` checks what the user may read and leaves the rest to the manager.
"""

from __future__ import annotations

import logging

from distributetrain.core import errors, exitcodes
from distributetrain.core.placement import inventory, volumeclaims
from distributetrain.core.settings import JobSettings
from distributetrain.core.placement.volumeclaims import UNREAD, Claim, ClaimUse, JobClaims
from distributetrain.kube.api import KubeApi
from distributetrain.manager.processstate import ProcessState

log = logging.getLogger(__name__)

BIND_POLL_S = 1.0  # a claim not bound yet is read again this often


def read_claims(kube: KubeApi, settings: JobSettings, uses: bool = True,
                unreadable_ok: bool = False) -> JobClaims | None:
    """The job's claims (None without ``--pvc``), with the pods that mount its one-node
    claims now if ``uses``; ``UsageError`` for a claim that does not exist or no pod can
    mount; ``Forbidden`` where RBAC refuses a read, unless ``unreadable_ok`` (then what
    could not be read restricts nothing)."""
    if not settings.pvcs:
        return None
    claims = [read_claim(kube, settings.namespace, name, unreadable_ok)
              for name in dict.fromkeys(p.claim for p in settings.pvcs)]
    mounted = _uses(kube, settings.namespace, claims) if uses and any(c.one_node for c in claims) else ()
    return volumeclaims.job_claims(claims, settings.num_gpus, mounted)


def read_claim(kube: KubeApi, namespace: str, name: str, unreadable_ok: bool = False) -> Claim:
    pvc = _read(kube, "PersistentVolumeClaim", namespace, name, unreadable_ok)
    if pvc is UNREAD:
        return Claim(name)
    volume = ((pvc or {}).get("spec") or {}).get("volumeName") or ""
    pv = _read(kube, "PersistentVolume", None, volume, unreadable_ok) if volume else UNREAD
    class_name = volumeclaims.class_of(pvc or {})
    storage_class = (_read(kube, "StorageClass", None, class_name, unreadable_ok) if class_name and not volume
                     else UNREAD)
    try:
        return volumeclaims.read_claim(name, pvc, pv, storage_class)
    except LookupError:
        raise errors.UsageError("--pvc", f"no PersistentVolumeClaim {name!r} in namespace {namespace!r} "
                                         "(CLAIM:/PATH[:ro] names a claim of the job's namespace)") from None
    except volumeclaims.Unusable as e:
        raise errors.UsageError("--pvc", f"{e}: no pod of the job could ever mount it") from None


def _read(kube: KubeApi, kind: str, namespace: str | None, name: str, unreadable_ok: bool) -> dict | None:
    """The object (None: absent); ``UNREAD`` where RBAC refuses it and ``unreadable_ok``."""
    try:
        return kube.read(kind, namespace, name)
    except errors.Forbidden as e:
        if not unreadable_ok:
            raise
        log.info("cannot read %s %s (%s); the manager checks what it says", kind, name, e)
        return UNREAD


def _uses(kube: KubeApi, namespace: str, claims: list[Claim]) -> list[ClaimUse]:
    """Pods of the namespace that mount a one-node claim now, and where: bound, or pinned
    on their way (another manager's pods, created under the Lease a moment ago)."""
    one_node = {claim.name for claim in claims if claim.one_node}
    pods, _ = kube.list_all("Pod", namespace, field_selector=inventory.ACTIVE_PODS_SELECTOR)
    found = []
    for pod in pods:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName") or inventory.pinned_node(spec)
        if node and volumeclaims.mounts_now(pod):
            found.extend(ClaimUse(claim, pod["metadata"]["name"], node)
                         for claim in sorted(volumeclaims.mounted_claims(pod) & one_node))
    return found


def wait_until_bound(kube: KubeApi, state: ProcessState) -> None:
    """Return once no claim of the job waits for its binding (no pod of such a claim is
    scheduled before it, so neither is a plan made); raise ``JobFailed`` (75) when that
    takes longer than ``--worker-ready-timeout``, the bound of a pod's start."""
    settings, clock = state.settings, state.clock
    give_up_at = min(clock.monotonic() + settings.worker_ready_timeout_s, state.deadline)
    said = ""
    while settings.pvcs:
        claims = read_claims(kube, settings, uses=False)
        waiting = "; ".join(claim.pending for claim in claims.claims if claim.pending)
        if not waiting:
            return
        if clock.monotonic() >= give_up_at:
            raise errors.JobFailed(f"{waiting}; not bound within --worker-ready-timeout "
                                   f"{settings.worker_ready_timeout_s:.0f}s", exitcodes.TIMED_OUT)
        if waiting != said:
            log.info("job %s: waiting for its claims: %s", settings.job_name, waiting)
            said = waiting
        clock.sleep(BIND_POLL_S)
