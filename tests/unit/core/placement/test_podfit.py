"""A plan that fits the whole pod: each node offers the job only the share whose pod fits
its CPU, memory, ephemeral storage and pod slots, and one rank where its GPUs are shared."""

from hypothesis import given, strategies as st

from distributetrain.core.pods import manifests
from distributetrain.core.placement import placement
from distributetrain.core.placement.inventory import GpuLedger
from distributetrain.core.placement.podfit import SHARED, JobFit, PodShape
from distributetrain.core.placement.podrequests import FIT_RESOURCES, pod_requests
from distributetrain.core.settings import RuntimeClassTerms
from harness.builders import GIB, GKE_TIME_SHARED, GPU, JOB, TIME_SLICED, ledger_of, sized_node, tenant


@given(st.integers(1, 64), st.integers(1, 16_000), st.integers(64, 64 * 1024))
def test_the_shape_is_what_the_worker_and_the_chief_request(share, cpu_m, memory_mi):
    settings = JOB.replace(cpu_per_gpu_m=cpu_m, memory_per_gpu_bytes=memory_mi * 2**20)
    shape = PodShape.of_job(settings)
    for pod in (manifests.worker_pod(settings, 0, "n", share), manifests.chief_pod(settings, "n", share)):
        assert pod_requests(pod["spec"]) == shape.requests(share)


rooms = st.dictionaries(st.sampled_from(FIT_RESOURCES), st.integers(-5, 10_000), max_size=4)
shapes = st.builds(PodShape, st.fixed_dictionaries({r: st.integers(0, 3000) for r in FIT_RESOURCES}),
                   st.fixed_dictionaries({r: st.integers(0, 3000) for r in FIT_RESOURCES}))


@given(shapes, rooms, st.integers(0, 16))
def test_the_largest_share_fits_and_one_more_would_not(shape, room, most):
    share, limit = shape.largest_share(room, most)
    fits = lambda s: all(shape.requests(s)[r] <= left for r, left in room.items())  # noqa: E731
    assert 0 <= share <= most
    assert share == 0 or fits(share)
    assert share == most or not fits(share + 1)
    assert (limit is None) == (share == most)


def test_a_node_whose_cpu_other_pods_hold_is_capped_and_says_so():
    ledger = ledger_of([sized_node("gpu-a", 4, cpu="16"), sized_node("gpu-b", 2, cpu="2")],
                       [tenant("gpu-b", cpu="1500m"), tenant("gpu-a", cpu="11", gpus=1)])
    assert ledger.free() == {"gpu-a": 2, "gpu-b": 0}  # 5 CPUs left on gpu-a: 2 GPUs at 2 CPUs each
    assert ledger.unavailable() == ("gpu-a has 3 GPUs free but cpu for 2; gpu-b has 2 GPUs free but cpu for 0")


def test_memory_and_pod_slots_cap_too_and_finished_pods_hold_nothing():
    ledger = ledger_of([sized_node("a", 8, memory="20Gi"), sized_node("b", 8, pods="3")],
                       [tenant("b"), tenant("b"), tenant("b", cpu="60", phase="Succeeded")])
    assert ledger.free() == {"a": 2, "b": 8}  # 8Gi per GPU; b has one pod slot left
    full = ledger_of([sized_node("b", 8, pods="3")], [tenant("b"), tenant("b"), tenant("b")])
    assert full.usable("b") == (8, 0, "pods")


def test_a_time_sliced_node_offers_one_rank_and_none_where_the_job_has_one():
    nodes = [sized_node("sliced", 8, labels=TIME_SLICED), sized_node("whole", 2)]
    assert ledger_of(nodes).free() == {"sliced": 1, "whole": 2}
    own = tenant("sliced", gpus=1, labels={"distributetrain.io/job": "j", "distributetrain.io/owner-uid": "uid-1"})
    assert ledger_of(nodes, [own]).free() == {"sliced": 0, "whole": 2}
    other_run = tenant("sliced", gpus=1, labels={"distributetrain.io/job": "j", "distributetrain.io/owner-uid": "x"})
    assert ledger_of(nodes, [other_run]).free() == {"sliced": 1, "whole": 2}
    assert ledger_of(nodes, settings=JOB.replace(allow_shared_gpus=True)).free() == {"sliced": 8, "whole": 2}
    assert ("sliced has 8 GPUs free but they are time-sliced GPUs (nvidia.com/gpu.sharing-strategy=time-slicing, "
            "nvidia.com/gpu.replicas=4): 1 for one rank of the job (--allow-shared-gpus)") in ledger_of(nodes).unavailable()


def test_a_gke_time_shared_node_offers_one_rank_even_where_shared_gpus_are_allowed():
    # GKE's device plugin refuses a container more than one time-shared unit.
    nodes = [sized_node("gke", 6, labels=GKE_TIME_SHARED), sized_node("whole", 2)]
    allowed = JOB.replace(allow_shared_gpus=True)
    assert ledger_of(nodes, settings=allowed).free() == {"gke": 1, "whole": 2}
    assert ledger_of(nodes, settings=allowed).unavailable() == (
        "gke has 6 GPUs free but they are GPUs time-shared by GKE (cloud.google.com/gke-gpu-sharing-strategy="
        "time-sharing, cloud.google.com/gke-max-shared-clients-per-gpu=3): 1 for one rank of the job")


def test_a_mig_resource_is_a_gpu_resource_of_its_own_one_slice_per_pod():
    mig = "nvidia.com/mig-1g.10gb"
    ledger = GpuLedger(mig, fit=JobFit.of_job(JOB.replace(gpu_resource=mig)))
    a100 = sized_node("a100", 0)
    a100["status"]["allocatable"] = {mig: "7", "cpu": "96", "memory": "1Ti", "pods": "110"}
    ledger.add_node(a100)
    assert ledger.free() == {"a100": 1}
    assert placement.plan(ledger.free(), 1) == [("a100", 1)]


def test_the_most_the_job_could_ever_take_and_what_holds_back_the_rest():
    assert ledger_of([sized_node("a", 4, cpu="4"), sized_node("b", 4, cpu="6")]).most_for_job() == (5, "cpu")
    assert ledger_of([sized_node("s", 8, labels=TIME_SLICED), sized_node("w", 2)]).most_for_job() == (3, SHARED)
    assert ledger_of([sized_node("a", 4)], [tenant("a", cpu="64")]).most_for_job() == (4, None)  # tenants may leave


def test_without_a_fit_gpus_alone_count():
    ledger = GpuLedger(GPU)
    ledger.add_node(sized_node("a", 4, cpu="1", labels=TIME_SLICED))
    ledger.add_pod(tenant("a", cpu="1"))
    assert ledger.free() == {"a": 4}


# Per node: GPUs, CPUs, GiB of memory, pod slots, whether GFD says its GPUs are time-sliced.
sized_nodes = st.lists(st.tuples(st.integers(0, 8), st.integers(0, 40), st.integers(0, 100), st.integers(0, 3),
                                 st.booleans()), min_size=1, max_size=8)


@given(sized_nodes, st.integers(1, 20), st.booleans())
def test_every_planned_share_fits_its_node_and_shared_nodes_take_one_rank_unless_allowed(nodes, gpus, allowed):
    settings = JOB.replace(num_gpus=gpus, allow_shared_gpus=allowed)
    ledger = ledger_of([sized_node(f"n{i}", g, cpu=str(cpu), memory=f"{memory}Gi", pods=str(pods),
                             labels=TIME_SLICED if shared else None)
                        for i, (g, cpu, memory, pods, shared) in enumerate(nodes)], settings=settings)
    try:
        plan = placement.plan(ledger.free(), gpus)
    except placement.InsufficientGPUs:
        return
    shape = PodShape.of_job(settings)
    for name, share in plan:
        g, cpu, memory, pods, shared = nodes[int(name[1:])]
        asks = shape.requests(share)
        assert share <= g and asks["cpu"] <= cpu * 1000 and asks["memory"] <= memory * GIB and pods >= 1
        assert share == 1 or not shared or allowed


KATA = RuntimeClassTerms(overhead=(("cpu", "500m"), ("memory", "1Gi")))


def test_the_runtime_classs_overhead_counts_in_each_pod_of_the_job():
    """Admission adds the RuntimeClass's overhead to each pod and the scheduler counts it:
    so does the plan."""
    plain, kata = PodShape.of_job(JOB), PodShape.of_job(JOB.replace(runtime_class="kata", runtime_class_terms=KATA))
    assert kata.per_gpu == plain.per_gpu
    assert kata.fixed == {**plain.fixed, "cpu": plain.fixed["cpu"] + 500, "memory": plain.fixed["memory"] + GIB}
    # 8 CPUs hold 4 GPUs' requests (2 CPUs each) but not their overhead besides: 3.
    settings = JOB.replace(runtime_class="kata", runtime_class_terms=KATA)
    assert ledger_of([sized_node("a", 4, cpu="8")], settings=JOB).free() == {"a": 4}
    assert ledger_of([sized_node("a", 4, cpu="8")], settings=settings).free() == {"a": 3}
