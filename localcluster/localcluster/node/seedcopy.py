"""A node slot's image store made a hard-linked copy of the seed, again and again.

Linking every file of the seed takes 7-14 s on a loaded host (65,000 files, nearly all in
the unpacked layers), and a slot is copied again each time the seed changes: at each test
run whose images were rebuilt, though only the few layers of the rebuilt images are new.
So an unpacked layer (an overlayfs snapshot directory) the store holds under the seed's
name for it is kept where it is still linked to the seed's: where a file of it is the
seed's file (one inode). That proves the whole layer, as containerd never changes a
committed snapshot, one made again under the same name is all new files (the store's links
keep the old files' inodes from being reused), and a layer of the node's own has files of
its own. Everything else is small and linked again; containerd's databases, which it
writes in place, are copied.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SNAPSHOTS = Path("io.containerd.snapshotter.v1.overlayfs/snapshots")
DATABASES = "*.db"  # bolt: written in place, so copied, never linked


def copy(seed: Path, store: Path, skip: tuple[str, ...] = ()) -> None:
    """Make `store` the seed's copy (its files but `skip` at the top), reusing the layers an
    earlier copy linked that are still the seed's."""
    kept = _set_aside(store)
    try:
        _link_all_but_snapshots(seed, store, skip)
        for snapshot in sorted((seed / SNAPSHOTS).iterdir()) if (seed / SNAPSHOTS).is_dir() else []:
            target, previous = store / SNAPSHOTS / snapshot.name, kept / snapshot.name
            if _still_linked(snapshot, previous):
                previous.rename(target)
            else:
                _link(snapshot, target)
        for database in seed.rglob(DATABASES):
            linked = store / database.relative_to(seed)
            linked.unlink()
            shutil.copy2(database, linked)
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def _set_aside(store: Path) -> Path:
    """Move the store's layers out of the way of the copy, and remove the rest of the store."""
    kept = store.parent / f".{store.name}-snapshots"
    shutil.rmtree(kept, ignore_errors=True)
    if (store / SNAPSHOTS).is_dir():
        (store / SNAPSHOTS).rename(kept)
    shutil.rmtree(store, ignore_errors=True)
    return kept


def _link_all_but_snapshots(seed: Path, store: Path, skip: tuple[str, ...]) -> None:
    """Link the seed's tree but its snapshot directories (and `skip`) into `store`."""
    _make_dir_like(seed, store)
    for entry in seed.iterdir():
        if entry.name in skip:
            continue
        if SNAPSHOTS.parts[0] == entry.name:
            _make_dir_like(entry, store / entry.name)
            for part in entry.iterdir():
                if part.name == SNAPSHOTS.name:
                    _make_dir_like(part, store / SNAPSHOTS)
                else:
                    _link(part, store / entry.name / part.name)
        else:
            _link(entry, store / entry.name)


def _make_dir_like(source: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    shutil.copystat(source, target)  # mode, times and extended attributes


def _link(source: Path, target: Path) -> None:
    """Hard links of everything under `source` (symlinks, whiteouts and owners as they are)."""
    subprocess.run(["cp", "-al", str(source), str(target)], check=True)


def _still_linked(seed_layer: Path, store_layer: Path) -> bool:
    """Whether the store's layer is linked to the seed's: a layer without a file (only
    directories) is never taken for one, and costs nothing to link again."""
    sample = _first_file(seed_layer)
    if sample is None:
        return False
    try:
        return (store_layer / sample.relative_to(seed_layer)).lstat().st_ino == sample.lstat().st_ino
    except FileNotFoundError:
        return False


def _first_file(directory: Path) -> Path | None:
    """The first entry that is not a directory, depth first, in name order."""
    with os.scandir(directory) as scanned:
        entries = sorted(scanned, key=lambda entry: entry.name)
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            return Path(entry.path)
    for entry in entries:
        if found := _first_file(Path(entry.path)):
            return found
    return None
