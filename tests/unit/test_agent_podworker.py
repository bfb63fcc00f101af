"""Restart decisions and the kubelet's crash-loop back-off."""

from localcluster.agent.podworker import BACKOFF_MAX_S, next_backoff, should_restart


def test_restart_policy():
    assert should_restart("Always", 0) and should_restart("Always", 1)
    assert should_restart("OnFailure", 137) and not should_restart("OnFailure", 0)
    assert not should_restart("Never", 1)


def test_back_off_is_immediate_then_doubles_to_five_minutes():
    delays, backoff = [], 0.0
    for _ in range(8):
        delay, backoff = next_backoff(backoff, since_last_exit_s=1.0)
        delays.append(delay)
    assert delays == [0, 10, 20, 40, 80, 160, BACKOFF_MAX_S, BACKOFF_MAX_S]


def test_back_off_resets_after_a_long_healthy_run():
    assert next_backoff(160.0, since_last_exit_s=3600.0) == (0.0, 10)
