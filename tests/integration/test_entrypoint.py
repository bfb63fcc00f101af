"""The image's ENTRYPOINT runs in every job pod, and every rank, those started over SSH on
the workers included, runs with the chief's environment.

NGC's entrypoint sets up CUDA forward compatibility and exports what it found
(``_CUDA_COMPAT_STATUS``, ``LD_LIBRARY_PATH``); a pod that sets ``command`` replaces it.
Here a test entrypoint takes the image's place (a volume over /opt/nvidia, where the base
image's ENTRYPOINT lives): it exports a value of its own pod and leaves a file behind,
then runs its arguments, as NGC's does.
"""

import re

import pytest

from jobharness import job_args, node_pool, script_volume

pytestmark = pytest.mark.cluster

ENTRYPOINT = "nvidia_entrypoint.sh"  # /opt/nvidia/nvidia_entrypoint.sh, the base image's ENTRYPOINT
TEST_ENTRYPOINT = """\
#!/bin/sh
export DT_TEST_ENTRYPOINT="$(hostname)"
echo "$DT_TEST_ENTRYPOINT" > /tmp/dt-test-entrypoint-ran
exec "$@"
"""
ENV_PROBE = """\
import os, socket
ran = open("/tmp/dt-test-entrypoint-ran").read().strip() if os.path.exists("/tmp/dt-test-entrypoint-ran") else "-"
print(f"rank={os.environ['HOROVOD_RANK']} host={socket.gethostname()} "
      f"exported={os.environ.get('DT_TEST_ENTRYPOINT', '-')} ran_here={ran} "
      f"user_env={os.environ.get('SEED', '-')} chief_env={os.environ.get('DT_CHIEF_SLOTS', '-')}", flush=True)
"""
LINE = re.compile(r"rank=(\d+) host=(\S+) exported=(\S+) ran_here=(\S+) user_env=(\S+) chief_env=(\S+)")


def test_the_entrypoint_runs_and_every_rank_gets_the_chief_s_environment(cluster, api_client, namespace, jobs,
                                                                        tmp_path):
    files = {ENTRYPOINT: TEST_ENTRYPOINT, "env_probe.py": ENV_PROBE}
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, script_volume(api_client, namespace, files, tmp_path) as claim:
        (tmp_path / "volume" / ENTRYPOINT).chmod(0o755)
        args = [a for a in job_args(pool, claim, 2, "--env=SEED=7") if not a.startswith(("--pvc=", "--filename="))]
        cut = args.index("--")
        args[cut:cut] = [f"--pvc={claim}:/opt/nvidia:ro", "--filename=/opt/nvidia/env_probe.py"]
        jobs.submit("env", args)
        assert jobs.exit_code("env") == 0, jobs.report("env")
        chief = jobs.pod("env-chief")["spec"]["containers"][0]
        assert "command" not in chief and chief["args"][:2] == ["/bin/sh", "-c"]
        ranks = {int(m[0]): m[1:] for m in LINE.findall(jobs.logs("env-chief"))}
        assert sorted(ranks) == [0, 1], jobs.logs("env-chief")
        chief_host, worker_host = ranks[0][0], ranks[1][0]
        assert chief_host != worker_host  # rank 1 ran in the worker pod, started over SSH
        for rank, (host, exported, ran_here, user_env, chief_env) in ranks.items():
            # The entrypoint ran in this rank's own pod (the worker's sshd was started by it too) ...
            assert ran_here == host, (rank, ranks)
            # ... and the rank's environment is the chief's, as the chief's entrypoint made it.
            assert (exported, user_env, chief_env) == (chief_host, "7", "1"), (rank, ranks)
