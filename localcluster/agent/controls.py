"""Run-time controls of a node agent: files the launcher writes and the agent acts on.

The agent runs as its own process; files in its state directory are a channel
that needs no port and outlives either side restarting:

- `kubelet-restart/<node>`: play a kubelet restart on that node; the file holds
  how many seconds the node stays not Ready. The agent removes it as it acts.
- `images/<node>`: the images that node has pulled (its image cache), one per
  line; removing the file makes the node forget them.
- the cluster's pull-delays file (`--pull-delays-file`, JSON {image: seconds}):
  how long pulling each image takes on a node that does not have it yet;
  `pull-delays/<node>` (same form) overrides it for one node, so a test can
  slow its own nodes' pulls without slowing other tests'.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

KUBELET_RESTART_DIR = "kubelet-restart"
PULLED_IMAGES_DIR = "images"
NODE_PULL_DELAYS_DIR = "pull-delays"


def _write_atomically(path: Path, text: str) -> None:
    """Readers never see half a file: write beside it, then rename over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    temporary.replace(path)


def kubelet_restart_file(state_dir: Path, node: str) -> Path:
    return state_dir / KUBELET_RESTART_DIR / node


def request_kubelet_restart(state_dir: Path, node: str, not_ready_s: float) -> Path:
    """Ask the agent to take `node` through a kubelet restart; returns the file it removes once it acts."""
    path = kubelet_restart_file(state_dir, node)
    _write_atomically(path, f"{not_ready_s}\n")
    return path


def take_kubelet_restarts(state_dir: Path) -> dict[str, float]:
    """The restarts asked for since the last call ({node: seconds not Ready}); their files are removed."""
    requests = {}
    directory = state_dir / KUBELET_RESTART_DIR
    if not directory.is_dir():
        return requests
    for path in directory.iterdir():
        if path.name.startswith("."):
            continue
        try:
            requests[path.name] = float(path.read_text())
        except (OSError, ValueError) as error:
            log.warning("ignoring kubelet restart request %s: %s", path, error)
        path.unlink(missing_ok=True)
    return requests


def pulled_images_file(state_dir: Path, node: str) -> Path:
    return state_dir / PULLED_IMAGES_DIR / node


def read_pulled_images(path: Path) -> set[str]:
    try:
        return set(filter(None, path.read_text().splitlines()))
    except FileNotFoundError:
        return set()


def add_pulled_image(path: Path, image: str) -> None:
    _write_atomically(path, "".join(f"{name}\n" for name in sorted(read_pulled_images(path) | {image})))


def node_pull_delays_file(state_dir: Path, node: str) -> Path:
    return state_dir / NODE_PULL_DELAYS_DIR / node


def read_pull_delays(*paths: Path | None) -> dict[str, float]:
    """{image: seconds} of the files in order, a later file's entries over an earlier's.

    A missing file has none; so has an unreadable one (its pulls are then instant).
    """
    delays: dict[str, float] = {}
    for path in paths:
        if path is not None:
            delays.update(_read_pull_delays(path))
    return delays


def _read_pull_delays(path: Path) -> dict[str, float]:
    try:
        delays = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        log.warning("ignoring pull delays in %s: %s", path, error)
        return {}
    return {str(image): float(seconds) for image, seconds in delays.items()}


def write_pull_delays(path: Path, delays: Mapping[str, float]) -> None:
    _write_atomically(path, json.dumps(dict(sorted(delays.items())), indent=2) + "\n")
