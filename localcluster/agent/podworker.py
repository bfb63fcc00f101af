"""One pod's life on a node, from sandbox to final delete (the kubelet's pod worker).

Each pod gets a thread that owns all of its state, so its lifecycle reads as
a sequence: set up the sandbox (retrying while Secrets or claims are
missing), run init containers one by one, start the containers (each once its
image is on the node: a slow pull waits without blocking the worker), probe them,
restart them per restartPolicy with the kubelet's back-off (immediately, then
10 s doubling up to 5 min), and on deletion SIGTERM them, SIGKILL after the
grace period, tear the sandbox down and delete the pod with grace 0. Other
threads only post events (new pod version, deleted, container exited,
agent shutdown) to the worker's queue.
"""

from __future__ import annotations

import datetime
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from localcluster.agent import images
from localcluster.agent.containerenv import ContainerConfigError, PodContext, kubelet_env
from localcluster.agent.containerlogs import LogWriter
from localcluster.agent.events import EventRecorder, PodEvent
from localcluster.agent.kubeapi import ApiError, Unavailable
from localcluster.agent.netns import NetworkError
from localcluster.agent.network import AddressesExhausted, NodeNetwork
from localcluster.agent.objects import ApiObjects
from localcluster.agent.podstatus import (
    RUNNING_STATE, TERMINATED, TERMINAL_PHASES, WAITING, ContainerView, PodView, Termination, build_status,
    pod_phase, terminated_reason,
)
from localcluster.agent.probes import (
    LIVENESS, PROBE_KINDS, PROBE_NAMES, READINESS, STARTUP, ProbeTarget, ProbeTracker, run_probe,
)
from localcluster.agent.runtime import (
    POD_UID_LABEL, ContainerProcess, LaunchSpec, StartError, security_options, start_container,
)
from localcluster.agent.sandbox import Sandbox
from localcluster.agent.settings import AgentSettings
from localcluster.agent.statusmanager import StatusManager
from localcluster.agent.supervisor import ExitStatus, Supervisor
from localcluster.agent.volumes import Mount, VolumeError, container_mounts, sort_mounts
from localcluster.podman import STATE_DIR_LABEL, PodmanError

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = 30
# The kubelet's floor for pods deleted with grace 0 (force delete).
MIN_GRACE_S = 2
AGENT_SHUTDOWN_GRACE_S = 5
BACKOFF_INITIAL_S = 10
BACKOFF_MAX_S = 300
# A container that ran this long without failing starts over at the initial back-off.
BACKOFF_RESET_S = 2 * BACKOFF_MAX_S
SETUP_RETRY_INITIAL_S = 1
SETUP_RETRY_MAX_S = 16
CONFIG_RETRY_S = 5
# How long to wait for exits after SIGKILL before giving up on a process.
KILL_CONFIRM_S = 10
IDLE_WAKEUP_S = 60
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"

# Worker states.
SETUP = "setup"
ACTIVE = "active"
KILLING = "killing"
DONE = "done"


@dataclass
class WorkerDeps:
    """What a pod worker needs from the agent."""

    settings: AgentSettings
    objects: ApiObjects
    supervisor: Supervisor
    status: StatusManager
    node_network: NodeNetwork
    allocatable: dict[str, str]
    events: EventRecorder
    images: images.NodeImages
    on_done: Callable[[str], None]


@dataclass
class _Run:
    """One run of a container."""

    container_id: str
    process: ContainerProcess
    probes: dict[str, ProbeTracker]
    kill_at: float | None = None


@dataclass
class _Container:
    spec: dict
    is_init: bool
    view: ContainerView
    run: _Run | None = None
    runs: int = 0
    next_start: float = 0.0
    backoff_s: float = 0.0
    image_backoff_s: float = 0.0
    pull: images.Pull | None = None
    last_exit: Termination | None = None
    last_exit_monotonic: float = 0.0
    logs: list[LogWriter] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec["name"]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def should_restart(restart_policy: str, exit_code: int) -> bool:
    return restart_policy == "Always" or (restart_policy == "OnFailure" and exit_code != 0)


def next_backoff(backoff_s: float, since_last_exit_s: float | None) -> tuple[float, float]:
    """(delay before this restart, back-off to use next time), as the kubelet's back-off table.

    The first restart is immediate; later ones wait 10 s, 20 s, ... up to 5 min.
    """
    if backoff_s == 0 or (since_last_exit_s is not None and since_last_exit_s > BACKOFF_RESET_S):
        return 0.0, BACKOFF_INITIAL_S
    return backoff_s, min(backoff_s * 2, BACKOFF_MAX_S)


class PodWorker(threading.Thread):
    """Runs one pod; the only thread that touches its state."""

    def __init__(self, pod: dict, deps: WorkerDeps):
        metadata = pod["metadata"]
        super().__init__(name=f"pod-{metadata['namespace']}/{metadata['name']}", daemon=True)
        self.uid: str = metadata["uid"]
        self.namespace: str = metadata["namespace"]
        self.pod_name: str = metadata["name"]
        self.key = f"{self.namespace}/{self.pod_name}"
        self._pod = pod
        self._deps = deps
        self._events: queue.Queue = queue.Queue()
        spec = pod["spec"]
        self._restart_policy = spec.get("restartPolicy", "Always")
        pod_dir = deps.settings.pods_dir / f"{self.namespace}_{self.pod_name}_{self.uid}"
        self._sandbox = Sandbox(pod, deps.node_network, pod_dir)
        init_specs = spec.get("initContainers") or []
        self._init = [self._new_container(c, True, "ContainerCreating") for c in init_specs]
        main_reason = "PodInitializing" if init_specs else "ContainerCreating"
        self._main = [self._new_container(c, False, main_reason) for c in spec["containers"]]
        self._view = PodView(
            init_containers=[c.view for c in self._init],
            containers=[c.view for c in self._main],
            restart_policy=self._restart_policy,
            host_ip=deps.node_network.node.ip,
        )
        self._state = SETUP
        self._setup_retry_at = 0.0
        self._setup_delay_s = SETUP_RETRY_INITIAL_S
        self._kill_deadline = 0.0
        self._killed_hard = False
        self._deletion_requested = False
        self._gone = False
        self._shutdown = False
        self._finalized = False
        self._deadline_at: float | None = None
        self._adopted_terminal = False

    @staticmethod
    def _new_container(spec: dict, is_init: bool, reason: str) -> _Container:
        view = ContainerView(name=spec["name"], image=spec.get("image", ""), waiting_reason=reason)
        return _Container(spec=spec, is_init=is_init, view=view)

    # Called from other threads.

    def update(self, pod: dict) -> None:
        self._events.put(("update", pod))

    def deleted(self, pod: dict) -> None:
        self._events.put(("deleted", pod))

    def shutdown(self) -> None:
        self._events.put(("shutdown", None))

    def log_file(self, container_name: str, previous: bool) -> tuple[Path, threading.Event | None] | None:
        """The log of the container's current (or previous) run, and the event that ends following it."""
        container = next((c for c in self._init + self._main if c.name == container_name), None)
        if container is None or not container.logs:
            return None
        if previous:
            return (container.logs[-2].path, None) if len(container.logs) > 1 else None
        current = container.logs[-1]
        return current.path, current.closed

    @property
    def container_names(self) -> list[str]:
        return [c.name for c in self._init + self._main]

    # The worker thread.

    def run(self) -> None:
        try:
            self._lifecycle()
        except Exception:
            log.exception("[%s] pod worker failed; killing the pod's processes", self.key)
        finally:
            for container in self._init + self._main:
                if container.run is not None:
                    container.run.process.remove()
            self._sandbox.release_network()
            if self._gone or self._shutdown:
                self._sandbox.remove_files()
            self._deps.on_done(self.uid)

    def _lifecycle(self) -> None:
        self._view.start_time = _now()
        status = self._pod.get("status") or {}
        if status.get("phase") in TERMINAL_PHASES:
            # Finished before this agent started: nothing to run or report, only the final delete to do.
            self._state = DONE
            self._adopted_terminal = True
        deadline_s = self._pod["spec"].get("activeDeadlineSeconds")
        if deadline_s is not None:
            self._deadline_at = time.monotonic() + deadline_s
        self._apply_pod(self._pod)
        while True:
            self._step()
            if self._state == DONE and (self._gone or self._shutdown):
                return
            self._publish()
            timeout = max(0.0, self._next_wakeup() - time.monotonic())
            try:
                event = self._events.get(timeout=timeout)
            except queue.Empty:
                continue
            self._handle(event)
            while True:
                try:
                    self._handle(self._events.get_nowait())
                except queue.Empty:
                    break

    def _handle(self, event: tuple) -> None:
        kind, payload = event
        if kind == "update":
            self._apply_pod(payload)
        elif kind == "deleted":
            self._gone = True
            self._deps.status.forget(self.uid)
            self._request_stop(MIN_GRACE_S)
        elif kind == "shutdown":
            self._shutdown = True
            self._request_stop(AGENT_SHUTDOWN_GRACE_S)
        elif kind == "exited":
            self._on_exit(*payload)

    def _apply_pod(self, pod: dict) -> None:
        self._pod = pod
        self._view.observed_generation = pod["metadata"].get("generation")
        gates = [gate["conditionType"] for gate in pod["spec"].get("readinessGates") or []]
        conditions = {c["type"]: c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
        self._view.readiness_gates_ready = all(conditions.get(gate) == "True" for gate in gates)
        metadata = pod["metadata"]
        if metadata.get("deletionTimestamp") and not self._deletion_requested:
            self._deletion_requested = True
            grace = metadata.get("deletionGracePeriodSeconds")
            if grace is None:
                grace = pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
            log.info("[%s] deletion requested, grace period %ss", self.key, grace)
            self._request_stop(max(grace, MIN_GRACE_S))

    def _request_stop(self, grace_s: float) -> None:
        """Kill the pod for good: SIGTERM now, SIGKILL after grace_s."""
        now = time.monotonic()
        if self._state in (SETUP, ACTIVE):
            self._begin_kill(grace_s, now)
        elif self._state == KILLING:
            self._kill_deadline = min(self._kill_deadline, now + grace_s)

    def _begin_kill(self, grace_s: float, now: float) -> None:
        self._view.terminating = True
        self._state = KILLING
        self._kill_deadline = now + grace_s
        for container in self._init + self._main:
            if container.run is not None:
                container.run.process.terminate()

    def _step(self) -> None:
        now = time.monotonic()
        if self._state == SETUP:
            if now >= self._setup_retry_at:
                self._set_up_sandbox(now)
        if self._state == ACTIVE:
            if self._deadline_at is not None and now >= self._deadline_at:
                log.info("[%s] active deadline exceeded", self.key)
                self._view.reason, self._view.message = "DeadlineExceeded", DEADLINE_MESSAGE
                self._begin_kill(self._pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_S), now)
            else:
                self._kill_overdue_runs(now)
                self._probe_due(now)
                self._start_due(now)
                if self._finished():
                    self._complete()
        if self._state == KILLING:
            if not self._running():
                self._complete()
            elif now >= self._kill_deadline + KILL_CONFIRM_S:
                log.error("[%s] processes still running %ss after SIGKILL; giving up on them", self.key, KILL_CONFIRM_S)
                for container in self._init + self._main:
                    if container.run is not None:
                        container.run.process.remove()
                    container.run = None
                self._complete()
            elif now >= self._kill_deadline and not self._killed_hard:
                self._killed_hard = True
                for container in self._init + self._main:
                    if container.run is not None:
                        container.run.process.kill()
        if self._state == DONE and self._deletion_requested and not self._finalized and not self._gone:
            self._finalized = True
            self._publish()
            self._deps.status.finalize(self.uid, self.namespace, self.pod_name)

    def _set_up_sandbox(self, now: float) -> None:
        settings = self._deps.settings
        try:
            self._sandbox.create(self._deps.objects, settings.ca_file, self._deps.allocatable)
        except (VolumeError, NetworkError, AddressesExhausted, OSError, ApiError, Unavailable) as error:
            log.warning("[%s] sandbox not ready, retrying in %ss: %s", self.key, self._setup_delay_s, error)
            self._set_waiting_message(str(error))
            reason = "FailedMount" if isinstance(error, VolumeError) else "FailedCreatePodSandBox"
            self._event(reason, str(error))
            self._setup_retry_at = now + self._setup_delay_s
            self._setup_delay_s = min(self._setup_delay_s * 2, SETUP_RETRY_MAX_S)
            return
        network = self._sandbox.network
        self._view.pod_ip = network.ip
        self._view.sandbox_ready = True
        self._set_waiting_message("")
        self._state = ACTIVE
        log.info("[%s] sandbox ready: %s in %s", self.key, network.ip, network.netns)

    def _set_waiting_message(self, message: str) -> None:
        for container in self._init + self._main:
            if container.view.state == WAITING and container.runs == 0:
                container.view.waiting_message = message

    def _running(self) -> bool:
        return any(c.run is not None for c in self._init + self._main)

    def _finished(self) -> bool:
        """Nothing runs and nothing will be started again."""
        if self._running():
            return False
        failed_init = next((c for c in self._init if c.view.failed), None)
        if failed_init is not None and self._restart_policy == "Never":
            return True
        if not all(c.view.succeeded for c in self._init):
            return False
        return all(
            c.view.state == TERMINATED and not should_restart(self._restart_policy, c.view.termination.exit_code)
            for c in self._main
        )

    def _complete(self) -> None:
        """Every process is gone: take the sandbox down; the pod stays until deleted."""
        self._state = DONE
        self._sandbox.release_network()
        self._view.sandbox_ready = False
        log.info("[%s] pod finished: %s", self.key, pod_phase(self._view))

    def _start_due(self, now: float) -> None:
        for container in self._init:
            if container.view.succeeded:
                continue
            if container.run is None and now >= container.next_start and self._may_start(container):
                self._start(container, now)
            return
        for container in self._main:
            if container.run is None and now >= container.next_start and self._may_start(container):
                self._start(container, now)

    def _may_start(self, container: _Container) -> bool:
        if container.runs == 0:
            return True
        return container.last_exit is not None and should_restart(self._restart_policy, container.last_exit.exit_code)

    def _start(self, container: _Container, now: float) -> None:
        settings = self._deps.settings
        sandbox = self._sandbox
        context = PodContext(
            pod=self._pod,
            pod_ip=self._view.pod_ip,
            host_ip=self._view.host_ip,
            hostname=sandbox.hostname,
            apiserver_host=settings.apiserver_host,
            apiserver_port=settings.apiserver_port,
            node_allocatable=self._deps.allocatable,
        )
        try:
            image = images.lookup(container.spec)
        except images.ImageUnavailable as error:
            self._image_unavailable(container, error, now)
            return
        except PodmanError as error:
            self._cannot_create(container, "CreateContainerError", str(error), now)
            return
        container.image_backoff_s = 0.0
        if not self._image_on_node(container, image, now):
            return
        try:
            kubelet_vars = kubelet_env(container.spec, context, self._deps.objects)
            argv = images.container_argv(container.spec, image, kubelet_vars)
            user = images.run_as(self._pod, container.spec, image)
            mounts = self._mounts(container)
        except (ContainerConfigError, VolumeError, ApiError, Unavailable) as error:
            self._cannot_create(container, "CreateContainerConfigError", str(error), now)
            return
        restart_count = container.view.restart_count + (1 if container.runs else 0)
        log_writer = LogWriter(sandbox.logs_dir / container.name / f"{restart_count}.log")
        container_id = uuid.uuid4().hex
        spec = LaunchSpec(
            name=f"k8s_{container.name}_{self.pod_name}_{self.namespace}_{self.uid[:8]}_{restart_count}",
            image_id=image.image_id,
            netns_path=sandbox.netns_path,
            hostname=sandbox.hostname,
            mounts=tuple(mounts),
            argv=tuple(argv),
            env=kubelet_vars,
            user=user,
            workdir=container.spec.get("workingDir") or "",
            security=tuple(security_options(self._pod, container.spec)),
            labels={STATE_DIR_LABEL: str(settings.state_dir), POD_UID_LABEL: self.uid},
        )

        def on_exit(exit_status: ExitStatus) -> None:
            self._events.put(("exited", (container, container_id, exit_status)))

        container.logs.append(log_writer)
        if container.runs:
            container.view.last_termination = container.last_exit
            container.view.restart_count = restart_count
        container.runs += 1
        view = container.view
        view.container_id = f"containerd://{container_id}"
        view.image_id = f"sha256:{image.image_id}"
        view.waiting_message = ""
        try:
            process = start_container(spec, image.stop_signal, log_writer, self._deps.supervisor, on_exit)
        except StartError as error:
            log.warning("[%s] container %s failed to start: %s", self.key, container.name, error)
            self._event("Failed", f"Error: {error}", container)
            log_writer.close()
            self._record_exit(container, 128, "StartError", str(error), None)
            return
        except PodmanError as error:
            log_writer.close()
            container.runs -= 1
            self._cannot_create(container, "CreateContainerError", str(error), now)
            return
        probes = {
            kind: ProbeTracker(kind, container.spec[kind], now)
            for kind in PROBE_KINDS if container.spec.get(kind)
        }
        container.run = _Run(container_id=container_id, process=process, probes=probes)
        view.started_at = process.started_at
        view.termination = None
        view.state = RUNNING_STATE
        view.started = STARTUP not in probes
        view.ready = view.started and READINESS not in probes and not container.is_init
        self._event("Started", f"Started container {container.name}", container, kind="Normal")
        log.info("[%s] started container %s (%s): %s", self.key, container.name, image.image_id[:12], argv[0])

    def _image_on_node(self, container: _Container, image: images.ImageConfig, now: float) -> bool:
        """Whether the node has the container's image; until then the container waits for its pull."""
        reference = container.spec.get("image", "")
        pull = self._deps.images.pull(reference, now)
        if pull is not None:
            if container.pull is None:
                log.info("[%s] container %s: pulling %s (%.1fs)", self.key, container.name, reference,
                         pull.done_at - now)
                self._event("Pulling", images.pulling_message(reference), container, kind="Normal")
            container.pull = pull
            container.next_start = pull.done_at
            return False
        if container.pull is not None:
            self._event("Pulled", images.pulled_message(container.pull, image.size), container, kind="Normal")
            container.pull = None
        else:
            self._event("Pulled", images.present_message(reference), container, kind="Normal")
        return True

    def _cannot_create(self, container: _Container, reason: str, message: str, now: float) -> None:
        """The container cannot be created yet: it waits with ``reason``; retried shortly."""
        log.warning("[%s] container %s cannot start: %s", self.key, container.name, message)
        container.view.state = WAITING
        container.view.waiting_reason = reason
        self._event("Failed", f"Error: {message}", container)
        container.view.waiting_message = message
        container.next_start = now + CONFIG_RETRY_S

    def _image_unavailable(self, container: _Container, error: images.ImageUnavailable, now: float) -> None:
        """The kubelet's image back-off: ErrImagePull, then ImagePullBackOff, retried 10 s doubling to 5 min."""
        view = container.view
        view.state = WAITING
        first = view.waiting_reason not in (images.ERR_IMAGE_PULL, images.IMAGE_PULL_BACKOFF,
                                            images.ERR_IMAGE_NEVER_PULL)
        if error.reason == images.ERR_IMAGE_PULL and not first:
            view.waiting_reason = images.IMAGE_PULL_BACKOFF
            view.waiting_message = f'Back-off pulling image "{container.spec.get("image")}"'
            self._event("BackOff", view.waiting_message, container, kind="Normal")
        else:
            view.waiting_reason, view.waiting_message = error.reason, error.message
            if error.reason == images.ERR_IMAGE_PULL:
                self._event("Failed", error.message, container)
            self._event("Failed", f"Error: {error.reason}", container)
            if error.reason != images.ERR_IMAGE_PULL:
                self._event(error.reason, error.message, container)
        if first:
            log.warning("[%s] container %s: %s: %s", self.key, container.name, error.reason, error.message)
        delay, container.image_backoff_s = next_backoff(container.image_backoff_s or BACKOFF_INITIAL_S, None)
        container.next_start = now + delay

    def _mounts(self, container: _Container) -> list[Mount]:
        volume_mounts = container_mounts(self._pod, container.spec, self._sandbox.volume_paths)
        mounts = list(volume_mounts)
        if not any(m.target == "/etc/hosts" for m in volume_mounts):
            mounts.append(Mount(source=str(self._sandbox.hosts_path), target="/etc/hosts", readonly=False))
        return sort_mounts(mounts)

    def _on_exit(self, container: _Container, container_id: str, exit_status: ExitStatus) -> None:
        run = container.run
        if run is None or run.container_id != container_id:
            return
        run.process.remove()
        container.run = None
        log.info("[%s] container %s exited with %d", self.key, container.name, exit_status.exit_code)
        self._record_exit(container, exit_status.exit_code, terminated_reason(exit_status.exit_code), "",
                          run.process.started_at)

    def _record_exit(
        self, container: _Container, exit_code: int, reason: str, message: str,
        started_at: datetime.datetime | None,
    ) -> None:
        """The run is over: its termination becomes the container's state; restart per policy."""
        now = time.monotonic()
        termination = Termination(
            exit_code=exit_code,
            reason=reason,
            started_at=started_at,
            finished_at=_now(),
            container_id=container.view.container_id,
            message=message,
        )
        since_last = now - container.last_exit_monotonic if container.last_exit else None
        container.last_exit = termination
        container.last_exit_monotonic = now
        view = container.view
        view.state, view.termination, view.ready, view.started = TERMINATED, termination, False, False
        if self._state != ACTIVE or not should_restart(self._restart_policy, exit_code):
            return
        if container.is_init and exit_code == 0:
            return
        delay, container.backoff_s = next_backoff(container.backoff_s, since_last)
        container.next_start = now + delay
        if delay > 0:
            view.state = WAITING
            view.waiting_reason = "CrashLoopBackOff"
            self._event("BackOff", f"Back-off restarting failed container {container.name} in pod "
                                   f"{self.pod_name}_{self.namespace}({self.uid})", container)
            view.waiting_message = (
                f"back-off {int(delay)}s restarting failed container={container.name} "
                f"pod={self.pod_name}_{self.namespace}({self.uid})"
            )
            view.last_termination, view.termination = termination, None

    def _kill_overdue_runs(self, now: float) -> None:
        for container in self._init + self._main:
            run = container.run
            if run is not None and run.kill_at is not None and now >= run.kill_at:
                run.process.kill()
                run.kill_at = None

    def _probe_due(self, now: float) -> None:
        for container in self._init + self._main:
            run = container.run
            if run is None or container.view.state != RUNNING_STATE or run.kill_at is not None:
                continue
            if not run.process.alive:
                # Exited; its pid may already belong to another process.
                continue
            for kind, tracker in run.probes.items():
                if tracker.next_due > now or (kind != STARTUP and not container.view.started):
                    continue
                target = ProbeTarget(
                    pod_ip=self._view.pod_ip, exec=run.process.exec, ports=container.spec.get("ports") or [],
                )
                ok, detail = run_probe(tracker.spec, target)
                flipped = tracker.record(ok, time.monotonic())
                if not ok and tracker.failures == tracker.failure_threshold:
                    self._event("Unhealthy", f"{PROBE_NAMES[kind]} probe failed: {detail}", container)
                if flipped or (not ok and log.isEnabledFor(logging.DEBUG)):
                    log.info("[%s] %s of %s: %s %s", self.key, kind, container.name,
                             "passing" if tracker.passing else "failing", detail)
                self._apply_probe(container, run, kind, tracker)

    def _apply_probe(self, container: _Container, run: _Run, kind: str, tracker: ProbeTracker) -> None:
        view = container.view
        if kind == STARTUP and tracker.passing and not view.started:
            view.started = True
            view.ready = READINESS not in run.probes and not container.is_init
        elif kind == READINESS:
            view.ready = tracker.passing
        if kind in (LIVENESS, STARTUP) and tracker.failed:
            grace = tracker.spec.get("terminationGracePeriodSeconds") or self._pod["spec"].get(
                "terminationGracePeriodSeconds", DEFAULT_GRACE_S
            )
            log.info("[%s] container %s failed its %s, killing it", self.key, container.name, kind)
            self._event("Killing", f"Container {container.name} failed {PROBE_NAMES[kind].lower()} probe, "
                                   "will be restarted", container, kind="Normal")
            run.process.terminate()
            run.kill_at = time.monotonic() + grace

    def _event(self, reason: str, message: str, container: _Container | None = None, kind: str = "Warning") -> None:
        if self._gone or self._shutdown:
            return
        field_path = ""
        if container is not None:
            field_path = f"spec.{'initContainers' if container.is_init else 'containers'}{{{container.name}}}"
        self._deps.events.record(PodEvent(
            namespace=self.namespace, pod_name=self.pod_name, pod_uid=self.uid,
            node=self._deps.node_network.node.name, reason=reason, message=message, field_path=field_path,
            kind=kind,
        ))

    def _next_wakeup(self) -> float:
        now = time.monotonic()
        times = [now + IDLE_WAKEUP_S]
        if self._state == SETUP:
            times.append(self._setup_retry_at)
        elif self._state == ACTIVE:
            if self._deadline_at is not None:
                times.append(self._deadline_at)
            for container in self._init + self._main:
                run = container.run
                if run is None:
                    if container.next_start > now:
                        times.append(container.next_start)
                    continue
                if run.kill_at is not None:
                    times.append(run.kill_at)
                times.extend(tracker.next_due for tracker in run.probes.values())
        elif self._state == KILLING:
            times.append(self._kill_deadline if not self._killed_hard else self._kill_deadline + KILL_CONFIRM_S)
        return min(times)

    def _publish(self) -> None:
        if self._gone or self._shutdown or self._adopted_terminal:
            return
        self._deps.status.publish(self.uid, self.namespace, self.pod_name, build_status(self._view, _now()))
