"""The manager's start-up is out of the garbage collector's reach before its job begins.

Its modules and the client's (some 100,000 objects) live as long as the process; a
collection walked them all whenever a large cluster's survey set one off (``cli.main.
freeze_start_up``; its cost on a burst of managers: bench/many_managers). Run in the
test's own process: the manager's command as manager.sh gives it, up to its lifecycle.
"""

import gc

from distributetrain.cli import main as cli
from distributetrain.core.clock import RealClock
from distributetrain.kube import connection
from distributetrain.manager.job import lifecycle

MANAGER_COMMAND = ["pre-training", "--num-gpus=2", "--image=reg/base:1", "--job-name=demo"]


def test_the_manager_s_job_begins_with_every_object_of_its_start_up_frozen(monkeypatch):
    at_the_start: dict[str, int] = {}

    def execute(*_args) -> int:
        at_the_start.update(frozen=gc.get_freeze_count(), walked=len(gc.get_objects()))
        return 0

    monkeypatch.setattr(lifecycle, "execute", execute)
    monkeypatch.setattr(connection, "load_api_client", lambda *_args, **_kwargs: None)
    assert gc.get_freeze_count() == 0
    try:
        assert cli.dispatch(MANAGER_COMMAND, RealClock()) == 0
    finally:
        gc.unfreeze()
    assert at_the_start["frozen"] > 50_000, at_the_start  # every module imported by then
    # What a collection still walks: only what was made after the start-up.
    assert at_the_start["walked"] < at_the_start["frozen"] / 100, at_the_start
