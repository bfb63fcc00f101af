"""One survey of the cluster for every manager that asks for one while it is taken.

A booking starts from a survey of the cluster (``core.placement.clusterview``: the nodes, and what
every pod but the bookings holds), then reads the bookings afresh under the placement
Lease (``booking``). On a large cluster the survey is the long part (every pod: 150,000
of them), and many managers starting together (a sweep of trials, a burst of Kueue
admissions) would each take it. So the survey is shared, in a ConfigMap of the lock
namespace (``VIEW_NAME``):

- a manager uses only a survey begun after its booking began (``placing``), so it sees
  every node and pod there was then, as a survey of its own would (a node labelled, a pod
  deleted just before the job was submitted): the writer's wall clock against the
  reader's, where a skew only makes a manager survey for itself;
- none such published, the manager that takes the Lease ``VIEW_NAME`` (held, and renewed,
  only while it surveys) lists the cluster and publishes the survey; the others meanwhile
  wait on the ConfigMap (a watch), use the survey published next if it began after they
  asked, else try the Lease again. So one survey is taken at a time, however many
  managers ask: each waits for at most the survey under way and the next one. It waits
  as long as surveyors live (a dead one's Lease is taken over once it expires,
  ``SURVEYOR_LEASE_S`` without a renewal), up to the caller's deadline. A fixed, shorter
  bound made a burst of managers whose surveys ran long on a loaded API server (100 at
  once, 30,000 pods) each list every pod at once, which the server could not serve;
- anything else (the ConfigMap unreadable, the RBAC of an older ``rbac/`` without it, a
  survey too large to publish, the deadline): the manager surveys for itself. A survey
  is never needed for correctness, only for a plan that fits: the bookings under the
  Lease are what keeps two jobs off the same GPUs.

Whoever can write that ConfigMap can make managers plan on a wrong picture of the
cluster (the scheduler still refuses pods that do not fit): it is the same account's,
in the same namespace, as the placement Lease, which can stop every plan (``rbac/``).
"""

from __future__ import annotations

import base64
import logging

from distributetrain.core import errors, names
from distributetrain.core.clock import Clock
from distributetrain.core.placement.clusterview import ClusterView
from distributetrain.core.placement.inventory import ACTIVE_PODS_SELECTOR
from distributetrain.core.settings import JobSettings
from distributetrain.kube import dra
from distributetrain.kube.client import Kube
from distributetrain.kube.lock import PlacementLock
from distributetrain.manager.placement import journal, turns

log = logging.getLogger(__name__)

VIEW_NAME = f"{names.APP}-cluster-view"  # the ConfigMap holding the survey, and the Lease of its surveyor
DATA_KEY = "view.json.zlib"
# A ConfigMap holds 1 MiB at most; base64 takes a third more. Beyond it, each surveys alone.
MAX_PUBLISHED_BYTES = 700 * 1024
SURVEYOR_LEASE_S = 60  # a surveyor that died lets another survey after this long
# A waiting manager looks at the surveyor's Lease this often when nothing is published:
# a surveyor renews it every third of SURVEYOR_LEASE_S, so a dead one is seen as such.
SURVEYOR_CHECK_S = SURVEYOR_LEASE_S / 3


def take(kube: Kube, clock: Clock, journal_namespace: str, dra_gpus: bool = False) -> ClusterView:
    """A survey of the cluster: every node, every unfinished pod (the bookings kept apart),
    and first, the booking journal's position (in ``journal_namespace``); with ``dra_gpus``,
    every ResourceSlice and the devices every ResourceClaim holds (the jobs' own skipped),
    and no position (a DRA job lists the bookings: their devices are counted from them)."""
    view = ClusterView(taken_at=clock.now())
    if not dra_gpus:
        view.position = journal.position(kube, journal_namespace)
    for page, _ in kube.list_pages("Node"):
        for node in page:
            view.add_node(node)
    kube.each_pod_request(view.add_pod, view.forget_pods, field_selector=ACTIVE_PODS_SELECTOR)
    if dra_gpus:
        view.add_slices(dra.listed(kube, dra.SLICES))
        for page in dra.pages(kube, dra.CLAIMS):
            view.add_claims(page)
    return view


def begun_after(view: ClusterView | None, asked_at: float) -> bool:
    return view is not None and view.taken_at >= asked_at


def current(kube: Kube, settings: JobSettings, clock: Clock, give_up_at: float,
            asked_at: float | None = None) -> ClusterView:
    """A survey begun after ``asked_at`` (of ``clock.now``; None: this call): another
    manager's (published), or its own (published for the others); its own alone once
    ``give_up_at`` (of ``clock.monotonic``) has passed with no survey for it."""
    asked_at = clock.now() if asked_at is None else asked_at
    namespace = settings.lease_namespace
    # One for every try: a dead surveyor's Lease is judged expired on what this manager saw of it.
    surveyor = PlacementLock(kube, namespace, turns.identity(settings), -1.0, VIEW_NAME, clock,
                             SURVEYOR_LEASE_S)
    try:
        published, version = _read(kube, namespace)
        while not begun_after(published, asked_at):
            if clock.monotonic() >= give_up_at:
                log.warning("job %s: no survey of the cluster shared in time [%s/%s]; taking its own",
                            settings.job_name, namespace, VIEW_NAME)
                return take(kube, clock, namespace)
            surveyed = _survey_as_the_surveyor(kube, settings, clock, version, surveyor)
            if surveyed is not None:
                return surveyed
            published, version = _next_published(
                kube, namespace, version, min(give_up_at, clock.monotonic() + SURVEYOR_CHECK_S), clock)
        return published
    except (errors.Forbidden, errors.AdmissionRefused, errors.QuotaExceeded, errors.Invalid, errors.NotFound) as e:
        # Refused, not unreachable: an older rbac/, a policy of the namespace. Unreachable,
        # the survey of its own would fail as well: that is raised, as any list's failure.
        log.warning("job %s: cannot share the survey of the cluster [%s/%s] (%s); taking its own",
                    settings.job_name, namespace, VIEW_NAME, e)
    return take(kube, clock, namespace)


def _read(kube: Kube, namespace: str) -> tuple[ClusterView | None, str]:
    """The published survey (None if there is none, or not of this release's form) and the
    ConfigMap's resourceVersion ("" if there is none)."""
    config_map = kube.read("ConfigMap", namespace, VIEW_NAME)
    return (None, "") if config_map is None else _view_of(config_map)


def _view_of(config_map: dict) -> tuple[ClusterView | None, str]:
    data = (config_map.get("binaryData") or {}).get(DATA_KEY)
    view = ClusterView.decode(base64.b64decode(data)) if data else None
    return view, config_map["metadata"].get("resourceVersion", "")


def _survey_as_the_surveyor(kube: Kube, settings: JobSettings, clock: Clock, version: str,
                            surveyor: PlacementLock) -> ClusterView | None:
    """Survey and publish, holding the surveyor's Lease; None if another manager holds it."""
    try:
        surveyor.__enter__()
    except errors.LeaseBusy:
        return None  # another manager surveys
    try:
        view = take(kube, clock, settings.lease_namespace)
        _publish(kube, settings.lease_namespace, view, version)
    finally:
        try:
            surveyor.__exit__(None, None, None)
        except errors.LeaseLost as e:  # two surveys published: either is good
            log.info("job %s: %s", settings.job_name, e)
    return view


def _publish(kube: Kube, namespace: str, view: ClusterView, version: str) -> None:
    encoded = view.encode()
    if len(encoded) > MAX_PUBLISHED_BYTES:
        log.warning("the survey of the cluster is %d KiB, more than a ConfigMap holds: each manager takes its own",
                    len(encoded) // 1024)
        return
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": VIEW_NAME, "namespace": namespace, "labels": {names.LABEL_APP: names.APP},
                               **({"resourceVersion": version} if version else {})},
                  "binaryData": {DATA_KEY: base64.b64encode(encoded).decode()}}
    try:
        kube.update(config_map) if version else kube.create(config_map)
    except (errors.Conflict, errors.AlreadyExists):
        pass  # another manager published meanwhile: its survey is as good


def _next_published(kube: Kube, namespace: str, version: str, give_up_at: float,
                    clock: Clock) -> tuple[ClusterView | None, str]:
    """The survey another manager is taking, once published (a watch of the ConfigMap
    from ``version``, until it changes or ``give_up_at``): read from the watch's event, as
    100 managers waiting on one survey would each read it again at once."""
    while (left := give_up_at - clock.monotonic()) > 0:
        # From "" (none published yet), the watch starts now and sees it created. A bookmark
        # is no change (a watch from "" may get one at once: looked at, the waiters spun).
        for event_type, config_map in kube.watch("ConfigMap", namespace, version, left,
                                                 field_selector=f"metadata.name={VIEW_NAME}"):
            if event_type in ("ADDED", "MODIFIED"):
                return _view_of(config_map)
            if event_type != "BOOKMARK":
                break
        published, new_version = _read(kube, namespace)
        if new_version != version:
            return published, new_version
    return None, version
