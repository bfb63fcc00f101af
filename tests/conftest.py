"""Test-suite root: shared helpers (tests/jobharness.py) and fixtures for every tier.

Cluster fixtures come from tests/clusterfixtures.py (one cluster per session, one
namespace per test); ``rbac`` applies the project's own rbac/ into the test's namespace
and ``jobs`` submits manager pods there, so the manager always runs under exactly the
permissions users get.
"""

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from kubernetes import client

# With PYTHONDONTWRITEBYTECODE set (as in this project's shells) every run, on each xdist
# worker and in each `python -m distributetrain` a test starts, compiled the package and
# rewrote the asserts of every test module anew: seconds of each unit run. Their bytecode
# goes to the project's cache instead, out of the tree.
if sys.dont_write_bytecode:
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"] = str(Path.home() / ".cache/distributetrain/pycache")
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

sys.path.insert(0, str(Path(__file__).parent))
# The checkout's localcluster project, as the checkout's distributetrain (the current
# directory), whichever copy the venv has installed.
sys.path.insert(1, str(Path(__file__).parents[1] / "localcluster"))

from clusterfixtures import api_client, cluster, namespace  # noqa: E402,F401
from jobharness import Jobs  # noqa: E402
from projectrbac import apply_rbac, delete_shared_bindings  # noqa: E402

# Property tests judge what a function returns, not how fast: on a loaded machine (CI's
# cores are shared with the cluster's components) an example may take seconds, which
# Hypothesis's default 200 ms deadline and its too-slow health check would call failures.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """For scripts/test.sh's two-at-a-time step (pytest-xdist, ``--dist loadgroup``): a
    module's tests run on one worker, in order (its module fixtures, its fixed ports),
    unless the module names a group of its own (the modules that run Kueue share one).
    First of the hooks: xdist's own reads the groups into the test ids, and, run before
    this one, it saw none, so a module's tests ran on both workers at once (one worker's
    module fixture stopped Karpenter under the other's test)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def pytest_xdist_make_scheduler(config, log):
    """scripts/test.sh's two-at-a-time step: its longest groups first (tests/scheduling.py)."""
    if config.getoption("dist") == "loadgroup":
        from scheduling import LongestFirst
        return LongestFirst(config, log)
    return None


@pytest.fixture
def rbac(api_client, namespace):  # noqa: F811
    documents = apply_rbac(api_client, namespace)
    yield documents
    delete_shared_bindings(api_client, documents)


@pytest.fixture
def jobs(api_client, namespace, rbac):  # noqa: F811
    return Jobs(api_client, namespace)


# PodSecurity's strictest level, as locked-down clusters label their job namespaces.
RESTRICTED_LABELS = {"pod-security.kubernetes.io/enforce": "restricted",
                     "pod-security.kubernetes.io/enforce-version": "latest"}


@pytest.fixture
def restricted(api_client, namespace):  # noqa: F811
    """The test's namespace, enforcing PodSecurity `restricted`: every pod the test's
    job creates (manager, workers, chief, replacements) must pass it or be refused."""
    client.CoreV1Api(api_client).patch_namespace(namespace, {"metadata": {"labels": RESTRICTED_LABELS}})
    return namespace


@pytest.fixture(scope="module")
def kueue_running(cluster):  # noqa: F811
    """Kueue, for one module: stopped after it (its webhooks fail closed, and no other
    test's pods should go through it)."""
    cluster.start_kueue()
    try:
        yield cluster
    finally:
        cluster.stop_kueue()
