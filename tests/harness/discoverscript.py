"""The chief's discovery script (``core/pods/podscripts/discover.py``) as the chief runs it,
its files in a directory of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from distributetrain.core.pods import podscripts

WORKERS_FILE = "/tmp/distributetrain-workers"  # where the chief keeps its last answer


class DiscoverScript:
    def __init__(self, directory: Path):
        self.ssh_hosts = directory / "ssh-hosts"
        script = podscripts.load("discover.py", SSH_HOSTS_CONFIG=str(self.ssh_hosts))
        assert WORKERS_FILE in script
        self.path = directory / "discover"
        self.path.write_text(script.replace(WORKERS_FILE, str(directory / "workers")))

    def run(self, url: str, chief_address: str, slots: str = "1", wait_s: float | None = 5.0,
            ) -> subprocess.CompletedProcess:
        """``discover --wait WAIT_S`` (the chief's start), or ``discover`` when ``wait_s`` is None
        (horovodrun's every second)."""
        env = dict(os.environ, DT_HOSTS_URL=url, DT_CHIEF_ADDRESS=chief_address, DT_CHIEF_SLOTS=slots)
        wait = [] if wait_s is None else ["--wait", str(wait_s)]
        return subprocess.run([sys.executable, str(self.path), *wait], env=env, capture_output=True, text=True,
                              timeout=30)
