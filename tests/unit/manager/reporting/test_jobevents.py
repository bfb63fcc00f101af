"""The job's Event reasons: each with a type and an action events.k8s.io/v1 accepts."""

from distributetrain.manager.reporting import jobevents


def test_every_reason_has_a_valid_type_and_action():
    for reason, (kind, action) in jobevents.KINDS.items():
        assert kind in ("Normal", "Warning") and 0 < len(action) <= 128 and 0 < len(reason) <= 128
        assert reason[0].isupper() and reason.isalnum()
