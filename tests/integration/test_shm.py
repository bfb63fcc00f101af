"""Job pods get a memory-backed /dev/shm the size of their memory limit (or --shm-size),
not the container runtime's 64 MiB, in which NCCL and TensorFlow fail or crawl."""

import re

import pytest

from jobharness import SCRIPTS, job_args, node_pool, script_volume

pytestmark = pytest.mark.cluster

SHM_PROBE = """\
import os
st = os.statvfs("/dev/shm")
print(f"rank={os.environ.get('HOROVOD_RANK')} shm_bytes={st.f_blocks * st.f_frsize}", flush=True)
"""
MIB = 2**20


@pytest.mark.parametrize("flags,expected_mib", [(["--memory-per-gpu=384Mi"], 384),
                                                (["--memory-per-gpu=384Mi", "--shm-size=256Mi"], 256)])
def test_every_rank_sees_a_dev_shm_of_the_planned_size(cluster, api_client, namespace, jobs, tmp_path,
                                                        flags, expected_mib):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, {**SCRIPTS, "shm.py": SHM_PROBE}, tmp_path) as claim:
        args = [a.replace("/work/hello.py", "/work/shm.py") for a in job_args(pool, claim, 2, *flags)]
        jobs.submit("shm", args)
        assert jobs.exit_code("shm") == 0, jobs.report("shm")
        chief = jobs.pod("shm-chief")
        volume = next(v for v in chief["spec"]["volumes"] if v["name"] == "dshm")
        assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{expected_mib}Mi"}
        sizes = dict(re.findall(r"rank=(\d+) shm_bytes=(\d+)", jobs.logs("shm-chief")))
        assert sizes == {"0": str(expected_mib * MIB), "1": str(expected_mib * MIB)}, jobs.logs("shm-chief")
