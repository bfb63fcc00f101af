"""A slot's store copied from the seed again: the layers it linked before and the seed still
holds are kept as they are, everything else is the seed's now. On real files."""

from __future__ import annotations

import os
import shutil

import pytest

from localcluster.node import seedcopy

SNAPSHOTS = seedcopy.SNAPSHOTS
BLOB = "io.containerd.content.v1.content/blobs/sha256/ab12"
DATABASES = ("io.containerd.metadata.v1.bolt/meta.db", "io.containerd.snapshotter.v1.overlayfs/metadata.db")


def layer(seed, snapshot: str, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = seed / SNAPSHOTS / snapshot / "fs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def seed(tmp_path):
    seed = tmp_path / "seed"
    for name in (BLOB, *DATABASES, "generation"):
        (seed / name).parent.mkdir(parents=True, exist_ok=True)
        (seed / name).write_text(name)
    layer(seed, "1", {"usr/bin/python": "python", "etc/os-release": "debian"})
    layer(seed, "2", {"app/main.py": "v1"})
    os.symlink("python", seed / SNAPSHOTS / "1" / "fs" / "usr/bin/python3")
    return seed


def inode(path) -> int:
    return os.lstat(path).st_ino


def test_a_first_copy_links_every_file_copies_the_databases_and_skips_what_it_is_told(seed, tmp_path):
    store = tmp_path / "n1"
    seedcopy.copy(seed, store, skip=("generation",))
    for name in (BLOB, f"{SNAPSHOTS}/1/fs/usr/bin/python", f"{SNAPSHOTS}/2/fs/app/main.py"):
        assert inode(store / name) == inode(seed / name), name
    assert os.readlink(store / SNAPSHOTS / "1" / "fs" / "usr/bin/python3") == "python"
    for name in DATABASES:
        assert (store / name).read_text() == name and inode(store / name) != inode(seed / name)
    assert not (store / "generation").exists()


def test_a_copy_again_keeps_the_layers_still_the_seed_s_and_takes_the_seed_s_new_ones(seed, tmp_path):
    store = tmp_path / "n1"
    seedcopy.copy(seed, store)
    kept_layer = inode(store / SNAPSHOTS / "1")
    # The node pulled a layer of its own and wrote a file; the seed lost layer 2 and got 3.
    layer(store, "9", {"own": "pulled by the node"})
    (store / "stray").write_text("x")
    shutil.rmtree(seed / SNAPSHOTS / "2")
    layer(seed, "3", {"app/main.py": "v2"})

    seedcopy.copy(seed, store)
    assert inode(store / SNAPSHOTS / "1") == kept_layer, "an unchanged layer was linked again"
    assert sorted(p.name for p in (store / SNAPSHOTS).iterdir()) == ["1", "3"]
    assert inode(store / SNAPSHOTS / "3" / "fs" / "app/main.py") == inode(seed / SNAPSHOTS / "3" / "fs" / "app/main.py")
    assert not (store / "stray").exists()
    assert not (tmp_path / ".n1-snapshots").exists()


def test_a_layer_the_seed_or_the_node_made_again_under_the_same_name_is_the_seed_s_again(seed, tmp_path):
    store = tmp_path / "n1"
    seedcopy.copy(seed, store)
    shutil.rmtree(seed / SNAPSHOTS / "2")
    layer(seed, "2", {"app/main.py": "another layer, the same number"})
    shutil.rmtree(store / SNAPSHOTS / "1")
    layer(store, "1", {"usr/bin/python": "the node's own"})

    seedcopy.copy(seed, store)
    for name in ("1/fs/usr/bin/python", "2/fs/app/main.py"):
        assert inode(store / SNAPSHOTS / name) == inode(seed / SNAPSHOTS / name), name

