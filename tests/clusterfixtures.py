"""Pytest fixtures for tests that run against the local cluster.

Plain fixtures, re-exported by the test suite's conftest.py
(`from clusterfixtures import cluster, namespace, api_client`), so every
suite shares one cluster per session and one fresh namespace per test.

Several pytest sessions (engineers, CI jobs) may share the host's one cluster,
so each session registers itself under the run directory and the cluster is
taken down when the last session that uses it ends, and only if tests started
it: a cluster brought up by hand (`python -m localcluster up`) stays up. Set
DT_KEEP_CLUSTER=1 to always leave it up (the next session attaches in about a
second instead of starting it).
"""

from __future__ import annotations

import fcntl
import os
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from localcluster.cluster import Cluster
from localcluster.layout import RunLayout

KEEP_CLUSTER_ENV = "DT_KEEP_CLUSTER"
NAMESPACE_PREFIX = "t-"
NAMESPACE_NAME_MAX_CHARS = 63
NAMESPACE_SUFFIX_HEX_CHARS = 6
TEST_NAMESPACE_LABEL = "distributetrain.test/namespace"


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The local cluster, up for the whole session and always taken down after it."""
    if os.geteuid() != 0:
        pytest.skip("the local cluster needs root (bridge, network namespaces, mounts)")
    layout = RunLayout.from_env()
    sessions = SessionRegistry(layout)
    sessions.join()
    try:
        yield Cluster.up(layout=layout)
    finally:
        keep = os.environ.get(KEEP_CLUSTER_ENV) == "1"
        sessions.leave(None if keep else Cluster(layout).down)


@pytest.fixture(scope="session")
def api_client(cluster: Cluster):
    """A kubernetes.client.ApiClient authenticated as the cluster admin."""
    client = cluster.api_client()
    yield client
    client.close()


@pytest.fixture
def namespace(api_client, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of its own for one test, deleted after it."""
    from kubernetes import client

    name = namespace_name(request.node.name)
    core = client.CoreV1Api(api_client)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={TEST_NAMESPACE_LABEL: "true"}))
    )
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except client.ApiException as error:
            if error.status != 404:
                raise


def namespace_name(test_name: str) -> str:
    """A unique DNS-1123 label derived from the test's name."""
    suffix = uuid.uuid4().hex[:NAMESPACE_SUFFIX_HEX_CHARS]
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")
    room = NAMESPACE_NAME_MAX_CHARS - len(NAMESPACE_PREFIX) - len(suffix) - 1
    slug = slug[:room].rstrip("-")
    return f"{NAMESPACE_PREFIX}{slug}-{suffix}" if slug else f"{NAMESPACE_PREFIX}{suffix}"


class SessionRegistry:
    """The pytest sessions using one run directory's cluster (one file per process)."""

    def __init__(self, layout: RunLayout):
        self._layout = layout
        self._directory = layout.root / "test-sessions"
        self._marker = self._directory / "started-by-tests"

    def join(self) -> None:
        """Register this process; note whether tests (rather than a person) start the cluster."""
        with self._locked():
            if not Cluster(self._layout).is_up():
                self._marker.touch()
            self._own_file().write_text(_start_time(os.getpid()))

    def leave(self, down: Callable[[], object] | None) -> None:
        """Unregister; call `down` if this was the last session and tests started the cluster."""
        with self._locked():
            self._own_file().unlink(missing_ok=True)
            if down is not None and not self.others_alive() and self._marker.exists():
                down()
                self._marker.unlink(missing_ok=True)

    def others_alive(self) -> bool:
        """Whether another live pytest session uses the cluster (stale entries are removed)."""
        alive = False
        for entry in self._directory.glob("[0-9]*"):
            if int(entry.name) == os.getpid():
                continue
            if entry.read_text() == _start_time(int(entry.name)):
                alive = True
            else:
                entry.unlink(missing_ok=True)
        return alive

    def _own_file(self) -> Path:
        return self._directory / str(os.getpid())

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self._directory.mkdir(parents=True, exist_ok=True)
        with open(self._directory / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


def _start_time(pid: int) -> str:
    """A process's start time in clock ticks since boot; with the pid, unique across pid reuse."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (FileNotFoundError, IndexError):
        return ""
