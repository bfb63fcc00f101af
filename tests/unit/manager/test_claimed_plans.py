"""The job's --pvc claims, read from an in-memory API: a claim that does not exist or that
no plan can serve is bad input naming it; every plan (direct, queued, elastic, on new
nodes) goes only where the claims can be mounted, by as many pods as they allow."""

import pytest

from distributetrain.core import errors
from distributetrain.core.placement import placement
from distributetrain.core.clock import FakeClock
from distributetrain.core.settings import PvcMount
from distributetrain.core.placement.volumeclaims import Claim, ClaimUse, JobClaims
from distributetrain.manager.placement import booking, queueing, volumeclaims
from distributetrain.manager.placement.freegpus import FreeGpuWatch, LedgerParts
from distributetrain.manager.placement.kinds import StaticJob
from distributetrain.manager.processstate import ProcessState
from distributetrain.manager.reporting.errorcodes import exit_code_of
from harness.builders import JOB, make_claim, make_node, make_pod, make_volume, node, sized_node, storage_class
from harness.kube import FakeKube
from harness.waiting import wait_until
from test_lifecycle_story import SETTINGS, PULLING, ended, running, story  # noqa: F401

ZONE = "topology.kubernetes.io/zone"
RWO, RWOP = "ReadWriteOnce", "ReadWriteOncePod"
DATA = (PvcMount("data", "/data"),)
ON_DATA = JOB.replace(pvcs=DATA)


def cluster(*objects, nodes=(), pods=()):
    kube = FakeKube(list(nodes), list(pods))
    for obj in objects:
        kube.put(obj)
    return kube


def zonal(zone="z2", modes=(RWO,)):
    """A claim bound to a disk of one zone, and its volume."""
    return (make_claim("data").modes(*modes).bound_to("pv-1").obj(),
            make_volume("pv-1").modes(*modes).on_nodes(ZONE, zone).obj())


def in_zone(name, zone, gpus=4):
    return sized_node(name, gpus, labels={ZONE: zone})


def mounting(name, node_name, claim="data", phase="Running"):
    pod = make_pod(name).on(node_name).phase(phase).obj()
    pod["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]
    return pod


def test_a_claim_that_does_not_exist_is_bad_input_naming_it():
    with pytest.raises(errors.UsageError) as refused:
        volumeclaims.read_claims(cluster(), ON_DATA)
    assert str(refused.value) == ("--pvc: no PersistentVolumeClaim 'data' in namespace 'ns' "
                                  "(CLAIM:/PATH[:ro] names a claim of the job's namespace)")


def test_a_claim_no_pod_can_mount_is_bad_input_naming_it():
    with pytest.raises(errors.UsageError) as refused:
        volumeclaims.read_claims(cluster(make_claim("data").bound_to("pv-gone").obj()), ON_DATA)
    assert str(refused.value) == ("--pvc: claim data is bound to PersistentVolume pv-gone, which does not exist: "
                                  "no pod of the job could ever mount it")


def test_the_claims_as_read_with_the_pods_that_mount_a_one_node_one_now():
    kube = cluster(*zonal(), make_claim("shared").bound_to("pv-2").obj(), make_volume("pv-2").obj(),
                   pods=[mounting("notebook", "b"), mounting("done", "c", phase="Succeeded"),
                         mounting("reader", "d", claim="shared")])
    settings = JOB.replace(pvcs=(*DATA, PvcMount("shared", "/shared"), PvcMount("data", "/again")))
    assert volumeclaims.read_claims(kube, settings) == JobClaims(
        (Claim("data", terms=volumeclaims.read_claim(kube, "ns", "data").terms,
               where="PersistentVolume pv-1's node affinity", modes=(RWO,)),
         Claim("shared", modes=("ReadWriteMany",))), gpus=4, uses=(ClaimUse("data", "notebook", "b"),))
    assert volumeclaims.read_claims(kube, JOB) is None  # no --pvc: nothing read


@pytest.mark.parametrize("refused", ["PersistentVolumeClaim", "PersistentVolume", "StorageClass"])
def test_a_manager_rbac_does_not_let_read_a_claim_is_refused_and_submit_leaves_it_to_the_manager(refused):
    kube = cluster(*zonal(), make_claim("fresh").of_class("gp3").obj(), storage_class("gp3"))
    kube.forbidden_reads = {refused}
    settings = ON_DATA.replace(pvcs=(*DATA, PvcMount("fresh", "/fresh")))
    with pytest.raises(errors.Forbidden) as denied:
        volumeclaims.read_claims(kube, settings)
    assert exit_code_of(denied.value) == 77 and f'cannot get resource "{refused}"' in str(denied.value)
    known = volumeclaims.read_claims(kube, settings, uses=False, unreadable_ok=True)
    assert [claim.name for claim in known.claims] == ["data", "fresh"]
    if refused == "PersistentVolume":  # what the claim's status says of its volume is still read
        assert known.claims[0] == Claim("data", modes=(RWO,))


@pytest.mark.parametrize("objects,nodes,settings,says", [
    (zonal("z9"), [in_zone("a", "z1"), in_zone("b", "z2")], ON_DATA,
     "requested 4 GPUs but of the 8 GPUs the cluster's nodes advertise, 0 are on nodes that can mount the job's "
     "claims: 2 nodes cannot mount claim data (PersistentVolume pv-1's node affinity)"),
    (zonal("z2"), [in_zone("a", "z1"), in_zone("b", "z2", 2), in_zone("c", "z2", 2)], ON_DATA.replace(num_gpus=6),
     "requested 6 GPUs but of the 8 GPUs the cluster's nodes advertise, 4 are on nodes that can mount"),
    (zonal("z2"), [in_zone("a", "z1"), in_zone("b", "z2", 2), in_zone("c", "z2", 2)], ON_DATA,
     "requested 4 GPUs but claim data is ReadWriteOnce: every pod of the job on one node, and one of the "
     "cluster's nodes takes 2 of them at most"),
    (zonal("z2", (RWOP,)), [in_zone("b", "z2", 8)], ON_DATA.replace(min_gpus=2),
     "claim data is ReadWriteOncePod: one pod may mount it, and an elastic job (--elastic) runs a worker beside "
     "its chief; use a ReadWriteOnce or ReadWriteMany claim, or no --elastic"),
    # On nodes the cluster adds: one of them, for a job that goes on one node.
    (zonal("z2"), [], ON_DATA.replace(num_gpus=12, scale_up_node_gpus=8, wait_for_gpus_s=60.0),
     "requested 12 GPUs but claim data is ReadWriteOnce: every pod of the job on one node, and one of the "
     "cluster's nodes or a new node of --scale-up-node-gpus 8 takes 8 of them at most"),
    # A local volume: no node the cluster adds can mount it, so only the running ones count.
    ((make_claim("data").modes(RWO).bound_to("pv-1").obj(),
      make_volume("pv-1").modes(RWO).on_nodes("kubernetes.io/hostname", "a").obj()),
     [node("a", 4), node("b", 8)], ON_DATA.replace(num_gpus=8, scale_up_node_gpus=8, wait_for_gpus_s=60.0),
     "requested 8 GPUs but of the 12 GPUs the cluster's nodes advertise, 4 are on nodes that can mount"),
])
def test_a_job_its_claims_could_never_serve_is_bad_input_naming_the_claim(objects, nodes, settings, says):
    kube = cluster(*objects, nodes=nodes)
    with pytest.raises(errors.UsageError) as refused:
        booking.check_request(booking.take_inventory(kube, settings, FakeClock()), settings)
    assert refused.value.flag == "--pvc" and says in str(refused.value)
    # submit refuses it too, before it creates the manager (the nodes and claims as the user reads them).
    with pytest.raises(errors.UsageError, match="--pvc"):
        booking.check_nodes(nodes, settings, volumeclaims.read_claims(kube, settings, uses=False))


def test_every_placement_path_goes_only_where_the_claims_allow():
    kube = cluster(*zonal("z2", ("ReadWriteMany",)), nodes=[in_zone("a", "z1"), in_zone("b", "z2", 2),
                                                           in_zone("c", "z2", 2)])
    ledger = booking.take_inventory(kube, ON_DATA, FakeClock())
    booking.check_request(ledger, ON_DATA)
    assert ledger.free() == {"b": 2, "c": 2} and ledger.idle() == {"b": 2, "c": 2}
    assert StaticJob().plan(ledger.free(), 4) == [("b", 2), ("c", 2)]  # direct, and queued at admission:
    assert queueing.shares(ledger, 4, StaticJob()) == [2, 2]
    assert placement.up_to(ledger.free(), 3) == [("b", 2), ("c", 1)]  # elastic replacements
    assert "(1 other nodes are not selected, cannot mount the job's claims or have no nvidia.com/gpu)" in \
        ledger.unavailable()


def test_a_read_write_once_claim_puts_the_job_on_one_node_and_where_it_is_mounted():
    nodes = [in_zone("a", "z2", 8), in_zone("b", "z2", 4), in_zone("c", "z2", 4)]
    kube = cluster(*zonal("z2"), nodes=nodes)
    ledger = booking.take_inventory(kube, ON_DATA, FakeClock())
    assert ledger.free() == {"a": 8, "b": 4, "c": 4}
    assert StaticJob().plan(ledger.free(), 4) == [("b", 4)]
    # The elastic job's chief mounts it on c: its replacements go there, and never on a new node.
    kube.pods["chief"] = mounting("chief", "c")
    ledger = booking.take_inventory(kube, ON_DATA, FakeClock())
    assert ledger.free() == {"c": 4}
    assert placement.up_to(ledger.free(), 8) == [("c", 4)]
    assert ledger.unavailable().startswith("claim data (ReadWriteOnce) is mounted by chief on c: the job's pods go "
                                           "there only")
    grows = ON_DATA.replace(scale_up_node_gpus=8, wait_for_gpus_s=60.0, num_gpus=8)
    with pytest.raises(placement.InsufficientGPUs):
        booking.plan_or_grow(placement.plan, ledger.free(), grows, claims=ledger.volume_claims)


def test_a_job_on_one_node_grows_the_cluster_by_one_node_only():
    grows = ON_DATA.replace(scale_up_node_gpus=8, wait_for_gpus_s=60.0, num_gpus=6)
    claims = JobClaims((Claim("data", modes=(RWO,)),), 6)
    assert booking.plan_or_grow(placement.plan, claims.candidates({"a": 4, "b": 4}), grows, claims=claims) == [
        ("(new node)", 6)]
    with pytest.raises(placement.InsufficientGPUs):
        booking.plan_or_grow(placement.plan, {}, grows.replace(num_gpus=12), claims=claims)


def test_free_gpus_followed_while_waiting_leave_out_nodes_the_claims_refuse():
    claims = JobClaims((volumeclaims.read_claim(cluster(*zonal()), "ns", "data"),), 4)
    parts = LedgerParts.for_job(ON_DATA, claims)
    for name, zone in (("a", "z1"), ("b", "z2")):
        parts.apply_node("ADDED", in_zone(name, zone))
    assert parts.free() == {"b": 4}


class BindingClock(FakeClock):
    """A fake clock under which the PV controller binds claim data 3 s from now."""

    def __init__(self, kube):
        super().__init__()
        self.kube, self.binds_at = kube, self.monotonic() + 3

    def sleep(self, seconds):
        super().sleep(seconds)
        if self.monotonic() >= self.binds_at:
            self.kube.put(make_claim("data").of_class("fast").bound_to("pv-1").obj())
            self.kube.put(make_volume("pv-1").obj())


def run_of(settings, clock):
    return ProcessState(settings, reporter=None, attempt=None, deadline=float("inf"), gpus_until=0.0, hosts=None, clock=clock,
                        pods=None)


def test_a_claim_not_bound_yet_is_waited_for_then_the_job_plans():
    kube = cluster(make_claim("data").of_class("fast").obj(), storage_class("fast", binding="Immediate"))
    clock = BindingClock(kube)
    volumeclaims.wait_until_bound(kube, run_of(ON_DATA, clock))
    assert clock.binds_at <= clock.monotonic() < clock.binds_at + 2 * volumeclaims.BIND_POLL_S


def test_a_claim_never_bound_fails_the_job_after_the_worker_ready_timeout():
    kube = cluster(make_claim("data").of_class("fast").obj(), storage_class("fast", binding="Immediate"))
    with pytest.raises(errors.JobFailed) as failed:
        volumeclaims.wait_until_bound(kube, run_of(ON_DATA.replace(worker_ready_timeout_s=10.0), FakeClock()))
    assert failed.value.exit_code == 75 and str(failed.value) == (
        "claim data is not bound to a volume (StorageClass fast binds it at once): no pod of it is scheduled until "
        "then; not bound within --worker-ready-timeout 10s")


# -- a whole job --------------------------------------------------------------------------
ZONAL_JOB = SETTINGS.replace(pvcs=DATA)


def test_a_job_on_a_zonal_claim_trains_on_nodes_of_its_zone(story):
    claim, volume = zonal("z2", ("ReadWriteMany",))
    code, recorded, _ = story([
        [("demo-worker-0", running()), ("demo-chief", PULLING)],
        [("demo-chief", running(ip="10.0.0.3"))],
        [("demo-chief", ended(0))],
    ], settings=ZONAL_JOB, nodes=[in_zone("a", "z1", 1), in_zone("b", "z2", 1), in_zone("c", "z2", 1)],
        objects=[claim, volume])
    assert code == 0
    assert recorded[0] == ("Planned", "Normal", "2 GPUs on 2 nodes: b=1,c=1 (the chief's share last)")


def test_a_read_write_once_job_no_node_holds_whole_now_says_why_it_waits(story):
    """Node a has 4 GPUs, 2 of them another tenant's: without the claim the job would take
    a=2,b=2; with it, only a node with all 4 free takes it."""
    tenant = make_pod("tenant", "other").uid("t").on("a").gpus(2).obj()
    code, recorded, kube = story([], settings=ZONAL_JOB.replace(num_gpus=4),
                                 nodes=[in_zone("a", "z2", 4), in_zone("b", "z2", 2)], pods=[tenant],
                                 objects=zonal("z2"))
    assert code == 69 and kube.writes("create", "Pod") == []
    assert recorded[-1] == ("Failed", "Warning", "requested 4 GPUs but only 0 are free in the cluster; unavailable: "
                            "claim data is ReadWriteOnce: only a node with all 4 GPUs free takes the job "
                            "(use --wait-for-gpus to wait for them) (exit code 69)")


def test_a_job_its_claim_cannot_serve_exits_2_naming_it_and_creates_nothing(story):
    code, recorded, kube = story([], settings=ZONAL_JOB, nodes=[in_zone("a", "z1", 1), in_zone("b", "z1", 1)],
                                 objects=zonal("z2", ("ReadWriteMany",)))
    assert code == 2 and kube.writes("create", "Pod") == [] and kube.secrets == {}
    assert recorded == [("Failed", "Warning", "--pvc: requested 2 GPUs but of the 2 GPUs the cluster's nodes "
                         "advertise, 0 are on nodes that can mount the job's claims: 2 nodes cannot mount claim "
                         "data (PersistentVolume pv-1's node affinity) (exit code 2)")]


def test_zone_labels_on_a_volume_leave_out_nodes_of_other_zones_only():
    """A node without any zone label takes a VolumeZone-labelled volume (a single-zone cluster)."""
    claim = make_claim("data").bound_to("pv-1").obj()
    volume = make_volume("pv-1").labels({ZONE: "z1"}).obj()
    nodes = [make_node("a").labels({ZONE: "z2"}).gpus(1).obj(), node("b", 1), node("c", 1)]
    ledger = booking.take_inventory(cluster(claim, volume, nodes=nodes), JOB.replace(pvcs=DATA), FakeClock())
    assert sorted(ledger.free()) == ["b", "c"]


@pytest.mark.parametrize("nodes,fits", [((("a", 2), ("b", 2)), False), ((("a", 2), ("c", 4)), True)])
def test_a_job_waiting_for_gpus_on_a_one_node_claim_fits_only_where_one_node_holds_it(nodes, fits):
    kube = FakeKube([node(name, gpus) for name, gpus in nodes])
    claims = JobClaims((Claim("data", modes=(RWO,)),), 4, (ClaimUse("data", "gone-by-now", "z"),))
    with FreeGpuWatch(kube, ON_DATA, FakeClock(), client=lambda same: same, volume_claims=claims) as watch:
        wait_until(lambda: watch.fits() is not None, kube.changes, 5, "both lists in")
        assert watch.fits() is fits  # who mounted it then is the booking's to read again
