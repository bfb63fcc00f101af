"""The project's own podman: its storage and configuration, never the host's.

Images are built and containers run with the files images/podman-config.sh
writes under the cache directory (overlay storage, runc with cgroupfs, no podman
network, this machine's ulimits), named by the same CONTAINERS_* variables that
localcluster/env.sh exports, so `make setup` (which builds the images) and the tests share one store.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from localcluster.layout import cache_dir

PODMAN = "podman"
COMMAND_TIMEOUT_S = 120.0


class PodmanError(RuntimeError):
    """A podman command failed; the message is podman's own last error line."""


def containers_dir() -> Path:
    return cache_dir() / "containers"


def podman_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the project's podman configuration."""
    env = dict(os.environ if base is None else base)
    directory = containers_dir()
    env["CONTAINERS_CONF"] = str(directory / "containers.conf")
    env["CONTAINERS_STORAGE_CONF"] = str(directory / "storage.conf")
    env["CONTAINERS_REGISTRIES_CONF"] = str(directory / "registries.conf")
    return env


def podman(args: Sequence[str], timeout_s: float = COMMAND_TIMEOUT_S, check: bool = True) -> subprocess.CompletedProcess:
    """Run one podman command to completion (text output); PodmanError when ``check`` and it fails."""
    try:
        result = subprocess.run([PODMAN, *args], env=podman_env(), stdin=subprocess.DEVNULL, capture_output=True,
                                text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as error:
        raise PodmanError(f"podman {args[0]} did not finish within {timeout_s:.0f}s") from error
    if check and result.returncode != 0:
        raise PodmanError(error_message(result.stderr) or f"podman {args[0]} exited {result.returncode}")
    return result


def error_message(stderr: str) -> str:
    """podman's own error (its last `Error: ` line, without the prefix), else the last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line.removeprefix("Error: ") for line in lines if line.startswith("Error: ")]
    return errors[-1] if errors else (lines[-1] if lines else "")


def labelled_containers(label: str) -> dict[str, str]:
    """{container ID: the label's value} of every container (any state) that has ``label``."""
    listed = podman(["ps", "--all", "--filter", f"label={label}", "--format",
                     f'{{{{.ID}}}} {{{{index .Labels "{label}"}}}}'], check=False)
    return dict(line.split(" ", 1) for line in listed.stdout.splitlines() if " " in line)
