"""Bad input to a real manager pod: one line naming the flag, exit code 2, nothing created."""

import pytest

from jobharness import node_pool

pytestmark = pytest.mark.cluster

BASE = ["--image=distributetrain/base:0.1.0"]
CATALOGUE = {
    "zero": (["--num-gpus=0"], "--num-gpus"),
    "negative": (["--num-gpus=-3"], "--num-gpus"),
    "nonnumeric": (["--num-gpus=abc"], "--num-gpus"),
    "toolarge": (["--num-gpus=99"], "--num-gpus"),
    "port-range": (["--num-gpus=1", "--port=70000"], "--port"),
    "port-privileged": (["--num-gpus=1", "--port=80", "--host-network=true"], "--port"),
    "image": (["--num-gpus=1", "--image=Not An Image"], "--image"),
    "jobname": (["--num-gpus=1", "--job-name=Bad_Name"], "--job-name"),
    "unknown-flag": (["--num-gpus=1", "--gpus-please=4"], "--gpus-please"),
    "namespace": (["--num-gpus=1", "--namespace=does-not-exist"], "--namespace"),
    "resource": (["--num-gpus=1", "--gpu-resource=example.com/tpu"], "--gpu-resource"),
    "elastic-min-gpus": (["--num-gpus=2", "--elastic", "--min-gpus=3"], "--min-gpus"),
    "elastic-one-gpu": (["--num-gpus=1", "--elastic"], "--elastic"),
    "secret-name": (["--num-gpus=1", "--env-from-secret=Not_A_Name"], "--env-from-secret"),
    # Created, a chief with envFrom a missing Secret would never start (CreateContainerConfigError).
    "secret-missing": (["--num-gpus=1", "--env-from-secret=no-such-secret"], "--env-from-secret"),
    # Pod knobs naming what the cluster does not have: the manager's own read (a pull
    # Secret, a RuntimeClass under rbac/), the dry run's refusal (a PriorityClass).
    "pull-secret-missing": (["--num-gpus=1", "--image-pull-secret=no-such-secret"], "--image-pull-secret: no Secret"),
    "runtime-class-missing": (["--num-gpus=1", "--runtime-class=no-such-class"], "--runtime-class: no RuntimeClass"),
    "priority-class-missing": (["--num-gpus=1", "--pod-priority-class=no-such-class"],
                               "--pod-priority-class: no PriorityClass"),
}


def test_bad_input_catalogue(cluster, jobs):
    with node_pool(cluster, {"a": 2}) as pool:
        selector = [f"--node-selector={pool.selector}"]
        for name, (flags, _) in CATALOGUE.items():
            # A later flag wins, so the catalogue's --image replaces the valid one.
            jobs.submit(f"bad-{name}", [*BASE, *selector, *flags])
        for name, (_, flag) in CATALOGUE.items():
            job = f"bad-{name}"
            assert jobs.exit_code(job, timeout_s=90) == 2, (name, jobs.logs(job))
            errors = [line for line in jobs.logs(job).splitlines() if "error" in line.lower()]
            assert len(errors) == 1 and flag in errors[0], (name, jobs.logs(job))
        # Nothing was created: only the managers themselves exist, and no Secret.
        assert set(jobs.pods()) == {f"bad-{name}" for name in CATALOGUE}, list(jobs.pods())
        assert jobs.secrets("bad-") == []
