"""A node slot's image store as a copy of the machine's image cache: files shared by hard
links, containerd's databases copied, copied again when the seed or the store changed.
On real files in a temporary cache (the seed's containerd is the cluster tests')."""

from __future__ import annotations

import os

import pytest

from localcluster.node import imagecache

BLOB = "io.containerd.content.v1.content/blobs/sha256/ab12"
LAYER_FILE = "io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs/usr/bin/python"
DATABASES = ("io.containerd.metadata.v1.bolt/meta.db", "io.containerd.snapshotter.v1.overlayfs/metadata.db")


@pytest.fixture
def seed(tmp_path, monkeypatch):
    monkeypatch.setenv("DT_CACHE", str(tmp_path))
    seed = imagecache.seed_dir()
    for name in (BLOB, LAYER_FILE, *DATABASES):
        (seed / name).parent.mkdir(parents=True, exist_ok=True)
        (seed / name).write_text(name)
    (seed / imagecache.GENERATION_FILE).write_text("g1")
    return seed


def inode(path):
    return os.stat(path).st_ino


def test_a_store_shares_the_seed_s_files_and_copies_its_databases(seed, tmp_path):
    store = tmp_path / "node-images" / "n3"
    imagecache.prepare(store)
    for name in (BLOB, LAYER_FILE):
        assert inode(store / name) == inode(seed / name)
    for name in DATABASES:
        assert (store / name).read_text() == name and inode(store / name) != inode(seed / name)
    assert (store / imagecache.SEEDED_FILE).read_text() == "g1"
    assert not (store / imagecache.GENERATION_FILE).exists()


def test_a_store_is_copied_again_only_when_the_seed_changed_or_it_was_marked(seed, tmp_path):
    store = tmp_path / "node-images" / "n3"
    imagecache.prepare(store)
    (store / "pulled-by-the-node").write_text("its own")
    imagecache.prepare(store)
    assert (store / "pulled-by-the-node").exists(), "a store of the current seed was copied again"

    (seed / imagecache.GENERATION_FILE).write_text("g2")
    imagecache.prepare(store)
    assert not (store / "pulled-by-the-node").exists()
    assert (store / imagecache.SEEDED_FILE).read_text() == "g2"

    (store / "pulled-by-the-node").write_text("its own")
    imagecache.mark_for_reseeding(store)
    imagecache.prepare(store)
    assert not (store / "pulled-by-the-node").exists()


def test_without_a_seed_a_store_is_left_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv("DT_CACHE", str(tmp_path))
    store = tmp_path / "node-images" / "n1"
    store.mkdir(parents=True)
    (store / "pulled").write_text("x")
    imagecache.prepare(store)
    assert (store / "pulled").exists() and not (store / imagecache.SEEDED_FILE).exists()


def test_a_generation_names_the_set_of_images_whatever_their_order():
    one = imagecache.generation_of({"docker.io/a:1": "sha256:1", "docker.io/b:1": "sha256:2"})
    assert one == imagecache.generation_of({"docker.io/b:1": "sha256:2", "docker.io/a:1": "sha256:1"})
    assert one != imagecache.generation_of({"docker.io/a:1": "sha256:1", "docker.io/b:1": "sha256:3"})
