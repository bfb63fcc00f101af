"""The machine's image cache: the images every node's containerd starts with.

A real node keeps what it pulled across reboots, and nodes booted from one machine image
start with the same pre-pulled images. Here one seed store (a containerd root in the
cache) holds every image published to the local registry, pulled from it once per
machine and once again only for what changed. Each node slot's image store starts as a
hard-linked copy of the seed: it costs no disk until the node pulls something of its
own, so 65 nodes fit on a disk that holds the 2.4 GB base image a few times, not 65
times, and a fresh machine pulls each image once, not once per node slot.

Hard links are safe because containerd never writes a committed file in place: content
blobs are named by their digest and never change, a committed snapshot is a read-only
lower layer of its containers' overlay mounts (writes go to each container's own upper
directory), and removing either unlinks this store's name alone. The bolt databases,
which containerd writes in place, are copied.

A slot is seeded again (before its containerd starts) when the seed has changed since
(images rebuilt), and after its node forgot images: what it pulled again was its own.
Seeding again links only the layers new to the seed (``seedcopy``).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from localcluster import processes, registry
from localcluster.layout import RunLayout, cache_dir
from localcluster.node import containerdconfig, seedcopy
from localcluster.node.config import Mirror
from localcluster.probe import wait_until

log = logging.getLogger(__name__)

CONTAINERD = Path("/usr/bin/containerd")
CTR = Path("/usr/bin/ctr")
READY_TIMEOUT_S = 30.0
PULL_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 15.0
NAMESPACE = "k8s.io"  # the CRI plugin's
# What the CRI plugin sets on the images it pulls; the seed's look the same to it.
CRI_IMAGE_LABEL = "io.cri-containerd.image=managed"
SEED_FORM = 2  # what a seed holds of an image changed: tag, digest and ID (2), tag and digest (1)
GENERATION_FILE = "generation"  # in the seed: which images it holds
SEEDED_FILE = ".seeded-from"  # in a node's store: the seed generation it was copied from


def seed_dir() -> Path:
    return cache_dir() / "node-images" / "seed"


def generation_of(digests: dict[str, str]) -> str:
    """A name for a set of images ({reference: manifest digest}) in this module's form of a seed."""
    text = "\n".join([f"form {SEED_FORM}", *(f"{reference}@{digest}" for reference, digest in sorted(digests.items()))])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def refresh(layout: RunLayout, references: list[str]) -> bool:
    """Make the seed hold exactly `references` as the registry has them now; whether it
    changed. Unchanged layers are not pulled again."""
    digests = {reference: registry.digest_of(reference) for reference in references}
    wanted = {reference: digest for reference, digest in digests.items() if digest is not None}
    generation = generation_of(wanted)
    with _locked():
        current = seed_dir() / GENERATION_FILE
        if current.exists() and current.read_text() == generation:
            return False
        started = time.monotonic()
        with _seed_containerd(layout) as (ctr, hosts):
            kept = set()
            for reference, digest in sorted(wanted.items()):
                ctr("images", "pull", f"--hosts-dir={hosts}", f"--label={CRI_IMAGE_LABEL}", reference)
                # The names the CRI plugin gives an image it pulls besides its tag: by digest
                # (the pods' imageID) and by ID (which keeps its layers while tags come and go).
                names = [f"{registry.split_reference(reference)[0]}@{digest}"]
                if config_digest := registry.config_digest_of(reference):
                    names.append(config_digest)
                for name in names:
                    ctr("images", "tag", "--force", reference, name)
                kept.update([reference, *names])
            stale = [name for name in ctr("images", "list", "--quiet").split() if name not in kept]
            if stale:
                ctr("images", "remove", "--sync", *stale)
        current.write_text(generation)
        log.info("node image cache: %d images in %.1f s (%s)", len(wanted), time.monotonic() - started, seed_dir())
        return True


def prepare(store: Path) -> None:
    """Seed a node slot's store, unless it is a copy of the current seed already."""
    with _locked():
        generation_file = seed_dir() / GENERATION_FILE
        if not generation_file.exists():
            return  # no seed yet (no image published): the node pulls what it needs
        generation = generation_file.read_text()
        stamp = store / SEEDED_FILE
        if stamp.exists() and stamp.read_text() == generation:
            return
        started = time.monotonic()
        store.parent.mkdir(parents=True, exist_ok=True)
        seedcopy.copy(seed_dir(), store, skip=(GENERATION_FILE,))
        stamp.write_text(generation)
        log.info("node image store %s seeded in %.1f s", store, time.monotonic() - started)


def mark_for_reseeding(store: Path) -> None:
    """The node's next start copies the seed again (what it pulled since is its own)."""
    (store / SEEDED_FILE).unlink(missing_ok=True)


@contextmanager
def _locked() -> Iterator[None]:
    """One refresh or copy at a time, across test sessions: never a copy of a half-pulled seed."""
    seed_dir().parent.mkdir(parents=True, exist_ok=True)
    with open(seed_dir().parent / "seed.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextmanager
def _seed_containerd(layout: RunLayout) -> Iterator[tuple[Callable[..., str], Path]]:
    """A containerd of the seed alone (no CRI, nothing runs), for the time of a refresh;
    yields a function that runs ctr against it, and the hosts directory that sends its
    pulls straight to the local registry (not through the nodes' slow-pull proxy)."""
    state = layout.root / "seed-containerd"
    socket = state / "containerd.sock"
    hosts = state / "registry-hosts"
    mirror = Mirror(f"http://{registry.address()}", registry.MIRRORED_REGISTRIES)
    for mirrored, text in containerdconfig.registry_hosts(mirror).items():
        (hosts / mirrored).mkdir(parents=True, exist_ok=True)
        (hosts / mirrored / "hosts.toml").write_text(text)
    config_file = state / "containerd.toml"
    config_file.write_text(containerdconfig.seed_containerd_config(seed_dir(), state, socket))
    pid_file = layout.pid_file("seed-containerd")
    pid = processes.start_detached([str(CONTAINERD), f"--config={config_file}"], pid_file,
                                   layout.log_file("seed-containerd"), cwd=state,
                                   env=processes.environment_without_proxy())
    try:
        wait_until(socket.exists, READY_TIMEOUT_S, "the image cache's containerd socket")

        def ctr(*args: str) -> str:
            result = subprocess.run([str(CTR), f"--address={socket}", f"--namespace={NAMESPACE}", *args],
                                    capture_output=True, text=True, timeout=PULL_TIMEOUT_S, check=False,
                                    env=processes.environment_without_proxy())
            if result.returncode != 0:
                raise RuntimeError(f"ctr {' '.join(args)} (node image cache): {result.stderr.strip()}")
            return result.stdout

        yield ctr, hosts
    finally:
        processes.stop(pid, "the image cache's containerd", STOP_TIMEOUT_S)
        pid_file.unlink(missing_ok=True)
        shutil.rmtree(state, ignore_errors=True)
