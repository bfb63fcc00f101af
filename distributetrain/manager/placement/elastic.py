"""Following an elastic job (``--elastic``): workers come and go, training goes on.

The chief runs ``horovodrun --min-np M --max-np N --host-discovery-script ...`` and the
script asks the manager for the hosts (``discovery``). Here the manager keeps that
answer true and the job whole:

- the hosts served are the Ready workers only: every Ready, non-terminating worker of the
  attempt, with its real GPU share as slots (shares differ by node), in worker order; the
  chief's discovery script (``podscripts/discover.py``) puts the chief first. A change is
  published at the watch event that shows it, so Horovod sees it within about a second;
- a lost worker does not end the job. While the job has fewer GPUs than ``--num-gpus``
  (counting workers still starting), the manager plans replacements on whatever GPUs are
  free where the job's claims can be mounted (a ReadWriteOnce claim: on the chief's node,
  where it is mounted), under the placement Lease like any plan (``placing``): at once
  after a loss, then, while still short, once a change in the free GPUs it follows
  meanwhile (``freegpus``: no list while nothing changes) shows a replacement could fit
  (looked at every ``REPLACE_RECHECK_S``);
  replacements get fresh names (the next worker index), hence fresh addresses, so no
  replacement waits on a pod stuck terminating and Horovod's blacklist of a failed host
  never applies to it. A replacement never Ready within ``--worker-ready-timeout`` is
  deleted and planned again; its image pull or wait for a new node does not count
  (each replacement has a start budget of its own: ``startbudget.StartBudgets``).
  A rank that dies on a pod that
  stays is Horovod's to retry (``chief.sh``: ``--blacklist-cooldown-range``): the pod is
  live, so nothing here replaces it;
- growing back is best effort: a replacement that fails (a quota refusing the new pod
  while the lost one is still charged, the API server unreachable past its retries, the
  placement Lease busy or taken over, a create refused) is a WARNING line and a
  ``ReplaceFailed`` Event, and is tried again later (``REPLACE_RECHECK_S``, doubled per
  failure in a row up to ``REPLACE_BACKOFF_MAX_S``); so is a failed deletion of a worker
  never Ready. The training that runs goes on: only SIGTERM and programming errors end
  the follower;
- the chief deleted is lost (a restart, if allowed), as in a static job. The chief
  failing while fewer than ``--min-gpus`` GPUs were left is blamed on the lost workers
  (Horovod gave up after ``--elastic-timeout``): also a restart if allowed, never a hang.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from distributetrain.core import errors
from distributetrain.core.placement import gpuclaims, inventory, placement, podstate
from distributetrain.core.pods import manifests
from distributetrain.core.names import Attempt
from distributetrain.core.placement.placement import Plan, format_plan
from distributetrain.core.settings import JobSettings
from distributetrain.core.watching.startbudget import StartBudgets
from distributetrain.core.watching.startprogress import Stage, StageClocks
from distributetrain.kube import dra, waits
from distributetrain.kube.client import Kube
from distributetrain.manager.placement import booking, placing
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.watching import podwaits
from distributetrain.manager.processstate import ProcessState
from distributetrain.manager.watching.startwatch import StartWatch
from distributetrain.manager.watching.teardown import delete_because

log = logging.getLogger(__name__)

# While short of GPUs, a change to the free GPUs followed wakes the follower at once; it
# also looks this often (and waits this long after a first failure to grow back).
REPLACE_RECHECK_S = 10.0
REPLACE_BACKOFF_MAX_S = 60.0  # after failures in a row, at least this often
# Replacements just created count as held until the job's pods show them (client-go's
# controller "expectations"), so a look before their watch event never books them twice;
# one never seen (deleted at once) is forgotten after this long.
CREATED_UNSEEN_S = 30.0


class FreeGpusChanged:
    """The free GPUs followed while short changed: a replacement may fit now."""


FREE_GPUS_CHANGED = FreeGpusChanged()


@dataclass(frozen=True)
class HostsChanged:
    hosts: tuple[tuple[str, int], ...]  # (address, slots) of each Ready worker
    world: int  # GPUs trained on: the chief's and theirs


def live_workers(pods: Mapping[str, dict], attempt: Attempt) -> list[dict]:
    """Workers of the attempt that hold or will hold their GPUs: not ending, not ended."""
    workers = [
        pod for pod in pods.values()
        if podstate.is_worker_of(pod, attempt)
        and not podstate.is_terminating(pod) and not podstate.is_finished(pod)
    ]
    return sorted(workers, key=podstate.worker_index)


def ready_hosts(pods: Mapping[str, dict], attempt: Attempt) -> tuple[tuple[str, int], ...]:
    """What the manager serves the chief (``discovery``): (address, GPU share) of every Ready,
    non-terminating worker of the attempt, in worker order. The chief is not among them:
    its discovery script (``podscripts/discover.py``) puts it first."""
    return tuple((podstate.address(w), podstate.gpus_of(w)) for w in live_workers(pods, attempt)
                 if podstate.is_ready(w) and podstate.address(w))


def judge_elastic(settings: JobSettings, attempt: Attempt, published: tuple[tuple[str, int], ...]) -> podwaits.Judge:
    """The chief's end or loss, else the hosts differing from ``published``."""
    chief = attempt.chief

    def judge(pods: Mapping[str, dict]) -> podwaits.Outcome | HostsChanged | None:
        pod = pods.get(chief)
        if (gone := podstate.gone(pod)) is not None:
            return podwaits.PodLost(chief, gone)
        hosts = ready_hosts(pods, attempt)
        world = podstate.gpus_of(pod) + sum(slots for _, slots in hosts)
        if podstate.is_finished(pod):
            code = podstate.exit_code(pod)
            if code != 0 and world < settings.min_gpus:
                return podwaits.PodLost(chief, f"failed (exit code {code}) with {world} of --min-gpus "
                                            f"{settings.min_gpus} GPUs left: workers were lost")
            return podwaits.ChiefFinished(1 if code is None else code)
        if hosts != published:
            return HostsChanged(hosts, world)
        return None

    return judge


def waiting_workers(pods: Mapping[str, dict], attempt: Attempt) -> list[str]:
    """Live workers not Ready: they hold GPUs and train nothing (yet)."""
    return sorted(pod["metadata"]["name"] for pod in live_workers(pods, attempt) if not podstate.is_ready(pod))


def overdue_workers(pods: Mapping[str, dict], settings: JobSettings, budgets: StartBudgets,
                    waiting: list[str], slow: Mapping[str, tuple[Stage, float]], now: float) -> dict[str, str]:
    """The ``waiting`` workers whose start is late, each with why: as an attempt's start,
    ``--worker-ready-timeout`` counts only time no slow start (an image pull, a new node)
    explains, and each slow start has its own bound (``startbudget``)."""
    late = budgets.overdue(now, waiting, slow)
    return {name: past_bound or f"not Ready within --worker-ready-timeout {settings.worker_ready_timeout_s:.0f}s "
                                f"({podstate.why_not_ready(pods[name]) or 'Ready'})"
            for name, past_bound in late.items()}


def retry_delay(failures_in_a_row: int, recheck_s: float = REPLACE_RECHECK_S,
                backoff_max_s: float = REPLACE_BACKOFF_MAX_S) -> float:
    """How long growing back waits after failing that many times in a row."""
    return min(recheck_s * 2 ** (failures_in_a_row - 1), backoff_max_s)


def next_worker_index(pods: Mapping[str, dict]) -> int:
    """After every worker the job ever had in this attempt, terminating ones included."""
    return max((podstate.worker_index(p) for p in pods.values()), default=-1) + 1


class ElasticFollower:
    """From the chief's start to its end: publish the hosts, replace lost workers.

    The job's pods are an informer's, listed once. While short of GPUs, the free GPUs
    followed (``placing.FreeGpuBooking``) say when a change lets a replacement fit, and
    wake the wait on the job's pods at once; only then does it take the Lease and list
    afresh, so a job left short lists nothing while nothing changes."""

    def __init__(self, kube: Kube, state: ProcessState,
                 free_gpus_client: Callable[[Kube], Kube] | None = None,
                 recheck_s: float = REPLACE_RECHECK_S, backoff_max_s: float = REPLACE_BACKOFF_MAX_S):
        self.kube = kube
        self.recheck_s = recheck_s  # while short of GPUs, and the first delay after a failure
        self.backoff_max_s = backoff_max_s
        self.clock = state.clock  # the process's deadline is of it
        self.pods = state.pods  # the job's, as post-training follows them
        # Replacements booked (``placing``); the free GPUs followed while short of GPUs, after a booking found none.
        self.free_gpus = placing.FreeGpuBooking(kube, state.settings, state.clock, self._fits, free_gpus_client,
                                                self._wake)
        self.free_gpus_changed = False  # since the follower last looked (``_wake``)
        self.created_unseen: dict[str, float] = {}  # replacement -> when created (CREATED_UNSEEN_S)
        self.missing = 0  # GPUs short of --num-gpus, as the last pass counted them
        self.settings = state.settings
        self.attempt = state.attempt  # an elastic attempt lasts as long as its chief
        self.reporter = state.reporter
        self.hosts = state.hosts
        self.deadline = state.deadline
        self.published: tuple[tuple[str, int], ...] = ()
        self.world = 0  # GPUs of the published hosts and the chief
        self.next_replace_at = 0.0
        self.last_shortage = ""
        self.start_budgets = StartBudgets(self.settings)  # replacements' starts, one budget each
        self.stage_clocks = StageClocks()
        self.starts: StartWatch | None = None  # the Events of the job's pods, while a worker starts
        self.failures_in_a_row = 0  # of growing back: the backoff before the next try

    def follow(self) -> podwaits.Outcome:
        try:
            return self._follow()
        finally:
            self.free_gpus.close()
            self._stop_following_starts()

    def _wait_on_free_gpus_too(self) -> None:
        """From the first shortage on, the job's pods are followed on a thread of their own
        (until the job's loop ends): a wait on them is then a wait on a condition, which
        ``_wake`` can end."""
        self.pods.start()

    def _wake(self) -> None:
        """A change to the free GPUs followed (in their informer's thread): the wait on the
        job's pods ends, under its lock, so the change is not missed between two waits."""
        with self.pods.changed:
            self.free_gpus_changed = True
            self.pods.changed.notify_all()

    def _judge(self) -> Callable[[Mapping[str, dict]], podwaits.Outcome | HostsChanged | FreeGpusChanged | None]:
        judge = judge_elastic(self.settings, self.attempt, self.published)

        def judge_or_free_gpus(pods: Mapping[str, dict]) -> podwaits.Outcome | HostsChanged | FreeGpusChanged | None:
            outcome = judge(pods)
            if outcome is None and self.free_gpus_changed:
                self.free_gpus_changed = False
                return FREE_GPUS_CHANGED
            return outcome

        return judge_or_free_gpus

    def _follow(self) -> podwaits.Outcome:
        while True:
            wake_at = min(self.deadline, max(self.next_replace_at, self.clock.monotonic() + 0.1))
            result = waits.judged(self.pods, self._judge(), wake_at)
            outcome, pods = (result.outcome if isinstance(result, waits.Judged) else None), result.pods
            if isinstance(outcome, HostsChanged):
                self._publish(outcome)
            elif outcome is FREE_GPUS_CHANGED:
                # Only while short: a change seen as a booking ends (its own pods, say) is
                # not one, and the job's pods may not show that booking's workers yet.
                # After a failure, its backoff holds.
                if self.free_gpus.following and not self.failures_in_a_row:
                    self.next_replace_at = 0.0
            elif outcome is not None:
                return outcome
            elif self.clock.monotonic() >= self.deadline:
                return podwaits.TimedOut({})
            try:
                self._drop_overdue(pods)
                self._replace_if_short(pods)
            except errors.DistributeTrainError as e:  # (SIGTERM's Cancelled is none: teardown)
                self._failed_to_grow_back(e)

    def _failed_to_grow_back(self, error: errors.DistributeTrainError) -> None:
        """Best effort: the job trains on what it has, and tries again later."""
        self.failures_in_a_row += 1
        self.free_gpus.retry()
        delay = retry_delay(self.failures_in_a_row, self.recheck_s, self.backoff_max_s)
        self.next_replace_at = self.clock.monotonic() + delay
        log.warning("job %s: could not replace lost workers (%s); training goes on, next try in %.0fs",
                    self.settings.job_name, error, delay)
        self.reporter.events.record(jobevents.REPLACE_FAILED, f"{error}; training goes on, tried again later")

    def _publish(self, change: HostsChanged) -> None:
        before = self.world
        self.published, self.world = change.hosts, change.world
        self.hosts.publish(change.hosts)
        if before and change.world != before:
            text = f"{change.world} of {self.settings.num_gpus} GPUs on {len(change.hosts) + 1} hosts (was {before})"
            log.info("job %s: elastic hosts: %s: %s", self.settings.job_name, text,
                     " ".join(f"{a}:{s}" for a, s in change.hosts))
            self.reporter.events.record(jobevents.RESIZED, text)
        if change.world < before:
            self.next_replace_at = 0.0  # a loss: look for replacements at once

    def _drop_overdue(self, pods: Mapping[str, dict]) -> None:
        """A worker that never gets Ready (its image, its node, its sshd) would hold its GPUs
        for the rest of the job: delete it, and its GPUs are planned again."""
        settings = self.settings
        now = self.clock.monotonic()
        waiting = waiting_workers(pods, self.attempt)
        slow = self._slow_starts(pods, waiting, now)
        for name, why in overdue_workers(pods, settings, self.start_budgets, waiting, slow, now).items():
            log.warning("job %s: deleting worker %s: %s", settings.job_name, name, why)
            try:
                delete_because(self.kube, settings.namespace, name, why)
            except errors.DistributeTrainError as e:
                # Still overdue at the next pass: deleted then.
                raise errors.ApiError(f"could not delete worker {name}: {e}") from e
            self.next_replace_at = 0.0  # its GPUs: plan again at once

    def _slow_starts(self, pods: Mapping[str, dict], waiting: list[str], now: float) -> dict[str, tuple[Stage, float]]:
        """Which waiting workers pull their image or await a node, from the Events of the
        job's pods, followed only while some worker starts (a training job's namespace
        may record many Events; none are needed meanwhile)."""
        if not waiting:
            self._stop_following_starts()
            return {}
        if self.starts is None:
            self.starts = StartWatch(self.kube, self.settings, self.clock).__enter__()
        return self.starts.slow_starts(self.stage_clocks, pods, waiting, now)

    def _stop_following_starts(self) -> None:
        if self.starts is not None:
            self.starts.__exit__(None, None, None)
            self.starts = None

    def _replace_if_short(self, pods: Mapping[str, dict]) -> None:
        if self.clock.monotonic() < self.next_replace_at:
            return
        self.next_replace_at = self.clock.monotonic() + self.recheck_s
        self._replace(pods)
        self.failures_in_a_row = 0

    def _replace(self, pods: Mapping[str, dict]) -> None:
        settings = self.settings
        chief = pods.get(self.attempt.chief)
        held = (podstate.gpus_of(chief) if chief else 0) + sum(podstate.gpus_of(w) for w in live_workers(pods, self.attempt))
        missing = self.missing = settings.num_gpus - held
        if missing <= 0:
            self.free_gpus.close()
            return
        if not self.free_gpus.changed():
            return  # nothing freed since the last booking that could hold a replacement: no Lease, no list
        now = self.clock.monotonic()
        self.created_unseen = {name: at for name, at in self.created_unseen.items()
                               if name not in pods and now - at < CREATED_UNSEEN_S}
        if self.created_unseen:
            return  # the last replacements are not among the job's pods yet: looked at again at the next pass
        first = next_worker_index(pods)
        dra_nodes: set[str] = set()  # of the plan: nodes whose pods claim their GPUs

        def choose(ledger: inventory.GpuLedger) -> Plan:
            dra_nodes.update(ledger.dra_nodes())
            return placement.up_to(ledger.free(), missing)

        # From a fresh inventory under the Lease: the job's own pods count as used.
        booked = self.free_gpus.try_once(choose, lambda plan: self._create_replacements(plan, first, dra_nodes),
                                         until=self.clock.monotonic())  # booked whatever the free GPUs followed say
        if isinstance(booked, booking.Short):
            shortage = f"{missing} GPUs short of --num-gpus {settings.num_gpus}; none free yet " \
                       f"(unavailable: {booked.ledger.unavailable()})"
            if shortage != self.last_shortage:  # once per change, not every recheck
                log.info("job %s: %s", settings.job_name, shortage)
                self.last_shortage = shortage
            self.free_gpus.follow(booked.ledger)
            self._wait_on_free_gpus_too()
            return
        self.free_gpus.close()
        self._replaced(booked, missing, first)

    def _create_replacements(self, plan: Plan, first: int, dra_nodes: set[str]) -> list[dict]:
        """Workers of the next indexes on the plan's nodes; on a DRA node, claiming their GPUs."""
        settings = self.settings
        pods = [manifests.worker_pod(settings, first + i, node, share, self.attempt.number)
                for i, (node, share) in enumerate(plan)]
        pods = [gpuclaims.claiming_gpus(settings, pod) if node in dra_nodes else pod
                for pod, (node, _) in zip(pods, plan)]
        dra.create_templates(self.kube, gpuclaims.templates(settings, [share for node, share in plan
                                                                        if node in dra_nodes]))
        return self.kube.create_all_owned(pods)

    def _fits(self, free: Mapping[str, int]) -> bool:
        """Whether these free GPUs could take a replacement, as the booking would plan it."""
        try:
            placement.up_to(free, self.missing)
        except placement.InsufficientGPUs:
            return False
        return True

    def _replaced(self, plan: Plan, missing: int, first: int) -> None:
        settings = self.settings
        now = self.clock.monotonic()
        self.created_unseen.update((self.attempt.worker(first + i), now) for i in range(len(plan)))
        text = f"{sum(share for _, share in plan)} of {missing} missing GPUs: " + ", ".join(
            f"{self.attempt.worker(first + i)} on {node} ({share} GPUs)"
            for i, (node, share) in enumerate(plan))
        log.info("job %s: replacing lost workers: %s (plan %s)", settings.job_name, text, format_plan(plan))
        self.reporter.events.record(jobevents.WORKERS_CREATED, "replacing lost workers: " + text)
