"""Probe thresholds, timing and handlers."""

import socket

import pytest

from localcluster.agent.probes import LIVENESS, READINESS, STARTUP, ProbeTarget, ProbeTracker, resolve_port, run_probe


def test_readiness_starts_failed_and_needs_success_threshold():
    tracker = ProbeTracker(READINESS, {"successThreshold": 2, "periodSeconds": 5, "initialDelaySeconds": 3}, 100.0)
    assert tracker.next_due == 103.0 and not tracker.passing
    assert tracker.record(True, 103.0) is False
    assert tracker.next_due == 108.0
    assert tracker.record(True, 108.0) is True and tracker.passing


def test_readiness_flips_back_after_failure_threshold():
    tracker = ProbeTracker(READINESS, {"failureThreshold": 2}, 0.0)
    tracker.record(True, 0.0)
    assert tracker.record(False, 1.0) is False and tracker.passing
    assert tracker.record(False, 2.0) is True and not tracker.passing


def test_liveness_starts_passing_and_fails_after_threshold():
    tracker = ProbeTracker(LIVENESS, {}, 0.0)
    assert tracker.passing
    tracker.record(False, 1.0)
    tracker.record(False, 2.0)
    assert not tracker.failed
    assert tracker.record(False, 3.0) is True and tracker.failed


def test_startup_failure_is_reported_without_a_flip():
    tracker = ProbeTracker(STARTUP, {"failureThreshold": 1}, 0.0)
    assert tracker.record(False, 1.0) is False and tracker.failed


def test_named_ports_resolve():
    ports = [{"name": "ssh", "containerPort": 12345}]
    assert resolve_port("ssh", ports) == 12345
    assert resolve_port(80, ports) == 80 and resolve_port("80", ports) == 80
    with pytest.raises(ValueError, match="not a named port"):
        resolve_port("http", ports)


def test_tcp_probe_against_a_listener():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        target = ProbeTarget(pod_ip="127.0.0.1", exec=None, ports=[])
        assert run_probe({"tcpSocket": {"port": port}}, target) == (True, "")
    ok, detail = run_probe({"tcpSocket": {"port": port}}, target)
    assert not ok and detail
