"""`make demo` says why the manager failed or never ran, from its pod's own status."""

import pytest

from harness import scripts

demo = scripts.load("demo.py")


def pod(state: dict) -> dict:
    return {"status": {"containerStatuses": [{"image": "distributetrain/manager:0.1.0", "state": state}]}}


@pytest.mark.parametrize("state, expected", [
    ({"terminated": {"exitCode": 0, "reason": "Completed"}}, None),
    ({"running": {"startedAt": "x"}}, None),
    ({"terminated": {"exitCode": 128, "reason": "StartError",
                     "message": 'exec: "manager.sh": executable file not found in $PATH'}},
     'manager container terminated (exit code 128): StartError: exec: "manager.sh": executable file not found '
     "in $PATH"),
    ({"waiting": {"reason": "ErrImageNeverPull",
                  "message": 'Container image "x" is not present with pull policy of Never'}},
     'manager container waiting: ErrImageNeverPull: Container image "x" is not present with pull policy of Never'),
    ({"terminated": {"exitCode": 69, "reason": "Error"}},
     "manager container terminated (exit code 69): Error: no message"),
])
def test_the_demo_prints_the_reason_whenever_the_manager_fails(state, expected):
    assert demo.failure_reason(pod(state)) == expected


def test_a_manager_stuck_on_its_image_ends_the_demo_at_once():
    assert demo.container_state(pod({"waiting": {"reason": "ErrImagePull"}}))[1]["reason"] in demo.STUCK_REASONS
