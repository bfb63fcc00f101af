"""Readiness, liveness and startup probes, with the kubelet's timing and thresholds.

A probe's outcome only flips after successThreshold consecutive successes or
failureThreshold consecutive failures. Readiness and startup start out failed,
liveness starts out passing; liveness and readiness wait for startup. TCP and
HTTP probes connect from the host to the pod's address (every pod is on the
host bridge); exec probes run inside the container (`podman exec`), with its
user and environment.
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

READINESS = "readinessProbe"
LIVENESS = "livenessProbe"
STARTUP = "startupProbe"
PROBE_KINDS = (STARTUP, LIVENESS, READINESS)
PROBE_NAMES = {STARTUP: "Startup", LIVENESS: "Liveness", READINESS: "Readiness"}
EXEC_OVERHEAD_S = 5


@dataclass(frozen=True)
class ProbeTarget:
    """Where a container can be probed."""

    pod_ip: str
    exec: Callable[[list[str], float], subprocess.CompletedProcess]  # runs a command in the container
    ports: Sequence[dict]


class ProbeTracker:
    """One probe of one container run: when it is due and what it currently says."""

    def __init__(self, kind: str, spec: dict, started_at_monotonic: float):
        self.kind = kind
        self.spec = spec
        self.period_s = spec.get("periodSeconds", 10)
        self.timeout_s = spec.get("timeoutSeconds", 1)
        self.success_threshold = spec.get("successThreshold", 1)
        self.failure_threshold = spec.get("failureThreshold", 3)
        self.next_due = started_at_monotonic + spec.get("initialDelaySeconds", 0)
        self.passing = kind == LIVENESS
        self._successes = 0
        self.failures = 0

    def record(self, ok: bool, now_monotonic: float) -> bool:
        """Count one result; True when the probe's outcome flipped."""
        self.next_due = now_monotonic + self.period_s
        before = self.passing
        if ok:
            self._successes, self.failures = self._successes + 1, 0
            if self._successes >= self.success_threshold:
                self.passing = True
        else:
            self.failures, self._successes = self.failures + 1, 0
            if self.failures >= self.failure_threshold:
                self.passing = False
        return before != self.passing

    @property
    def failed(self) -> bool:
        """failureThreshold consecutive failures: a liveness or startup probe kills the container."""
        return self.failures >= self.failure_threshold


def run_probe(spec: dict, target: ProbeTarget) -> tuple[bool, str]:
    """Run one probe attempt; (success, what went wrong)."""
    timeout_s = spec.get("timeoutSeconds", 1)
    try:
        if "exec" in spec:
            return _exec(spec["exec"].get("command") or [], target, timeout_s)
        if "tcpSocket" in spec:
            handler = spec["tcpSocket"]
            port = resolve_port(handler["port"], target.ports)
            with socket.create_connection((handler.get("host") or target.pod_ip, port), timeout=timeout_s):
                return True, ""
        if "httpGet" in spec:
            return _http(spec["httpGet"], target, timeout_s)
    except (OSError, ValueError) as error:
        return False, str(error)
    return False, f"unsupported probe handler in {sorted(spec)}"


def resolve_port(port: int | str, ports: Sequence[dict]) -> int:
    """A probe port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for declared in ports:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise ValueError(f"port {port!r} is not a named port of the container")


def _exec(command: Sequence[str], target: ProbeTarget, timeout_s: int) -> tuple[bool, str]:
    try:
        # `podman exec` itself takes a fraction of a second before the command runs.
        result = target.exec(list(command), timeout_s + EXEC_OVERHEAD_S)
    except subprocess.TimeoutExpired:
        return False, f"command timed out after {timeout_s}s"
    if result.returncode == 0:
        return True, ""
    output = (result.stdout + result.stderr).decode(errors="replace").strip()
    return False, f"command exited {result.returncode}: {output[-200:]}"


def _http(handler: dict, target: ProbeTarget, timeout_s: int) -> tuple[bool, str]:
    host = handler.get("host") or target.pod_ip
    port = resolve_port(handler.get("port", 80), target.ports)
    if handler.get("scheme", "HTTP").upper() == "HTTPS":
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout_s, context=ssl._create_unverified_context()
        )
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    headers = {"User-Agent": "kube-probe/localcluster", "Accept": "*/*"}
    headers.update({h["name"]: h["value"] for h in handler.get("httpHeaders") or []})
    try:
        connection.request("GET", handler.get("path") or "/", headers=headers)
        status = connection.getresponse().status
    finally:
        connection.close()
    if 200 <= status < 400:
        return True, ""
    return False, f"HTTP probe failed with statuscode: {status}"
