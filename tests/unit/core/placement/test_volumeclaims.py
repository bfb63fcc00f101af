"""A claim read as the scheduler reads it (kube-scheduler 1.34's VolumeBinding, VolumeZone
and VolumeRestrictions, the attach-detach controller's multi-attach rule): whole claims
from whole objects, then the nodes and plans they allow, for all claims and nodes."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distributetrain.core.placement import placement
from distributetrain.core.placement.volumeclaims import (UNREAD, Claim, ClaimUse, JobClaims, Requirement, Unusable,
                                                         job_claims, mounted_claims, mounts_now, read_claim)
from harness.builders import make_claim, make_node, make_volume, storage_class

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
RWO, RWX, ROX, RWOP = "ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"
IN_Z1 = Requirement(ZONE, "In", ("z1",))


def labelled(name, labels=None):
    return make_node(name).labels(labels).obj()


@pytest.mark.parametrize("claim,volume,expected", [
    # An EBS/PD disk provisioned in one zone: its PV's node affinity, ReadWriteOnce.
    (make_claim("data").modes(RWO).bound_to("pv-1"), make_volume("pv-1").modes(RWO).on_nodes(ZONE, "z1"),
     Claim("data", terms=((IN_Z1,),), where="PersistentVolume pv-1's node affinity", modes=(RWO,))),
    # A local volume: one node by its hostname label.
    (make_claim("scratch").modes(RWO).bound_to("pv-2"), make_volume("pv-2").modes(RWO).on_nodes(HOST, "n1"),
     Claim("scratch", terms=((Requirement(HOST, "In", ("n1",)),),), where="PersistentVolume pv-2's node affinity",
           modes=(RWO,))),
    # NFS, EFS, Filestore: any node, many of them.
    (make_claim("shared").bound_to("pv-3"), make_volume("pv-3"), Claim("shared", modes=(RWX,))),
    # An in-tree provisioner's disk: zone labels on the PV (VolumeZone), several zones joined by "__".
    (make_claim("old").modes(RWO).bound_to("pv-4"),
     make_volume("pv-4").modes(RWO).labels({"failure-domain.beta.kubernetes.io/zone": "z1__z2"}),
     Claim("old", zones=(("failure-domain.beta.kubernetes.io/zone", frozenset({"z1", "z2"})),),
           where="PersistentVolume pv-4's labels failure-domain.beta.kubernetes.io/zone=z1__z2",
           modes=(RWO,))),
    # ReadWriteOncePod on the claim: one pod.
    (make_claim("one").modes(RWOP).bound_to("pv-5"), make_volume("pv-5").modes(RWOP),
     Claim("one", modes=(RWOP,), one_pod=True)),
    # Bound to a read-only-many PV though the claim asked ReadWriteOnce: the PV's modes decide attachment.
    (make_claim("ro").modes(RWO).bound_to("pv-6"), make_volume("pv-6").modes(RWO, ROX), Claim("ro", modes=(RWO, ROX))),
])
def test_a_bound_claim_is_its_volumes_nodes_and_modes(claim, volume, expected):
    assert read_claim(expected.name, claim.obj(), volume.obj()) == expected


def test_what_a_volume_that_cannot_be_read_leaves_is_the_claims_own_view():
    """No rule to read PVs: no node is known, the modes bound are still in the claim's status."""
    assert read_claim("data", make_claim("data").modes(RWO).bound_to("pv-1").obj(), UNREAD) == \
        Claim("data", modes=(RWO,))


@pytest.mark.parametrize("claim,storage,expected", [
    # EBS gp3 on EKS: WaitForFirstConsumer, provisioned where the first pod goes: any node.
    (make_claim("d").modes(RWO).of_class("gp3"), storage_class("gp3"), Claim("d", modes=(RWO,))),
    (make_claim("d").modes(RWO).of_class("zonal"), storage_class("zonal", topologies=[{ZONE: ["z1", "z2"]}]),
     Claim("d", terms=((Requirement(ZONE, "In", ("z1", "z2")),),), where="StorageClass zonal's allowedTopologies",
           modes=(RWO,))),
    # The scheduler chose a node and the provisioner works on it: there only.
    (make_claim("d").modes(RWO).of_class("gp3").annotations({"volume.kubernetes.io/selected-node": "n1"}),
     storage_class("gp3"), Claim("d", node_name="n1", where="being provisioned for node n1", modes=(RWO,))),
    # Local volumes made by hand: the scheduler finds one on the node; the plan cannot know which.
    (make_claim("d").modes(RWO).of_class("local"), storage_class("local", provisioner="kubernetes.io/no-provisioner"),
     Claim("d", modes=(RWO,))),
    # The beta annotation names the class first, as the scheduler reads it.
    (make_claim("d").of_class("other").annotations({"volume.beta.kubernetes.io/storage-class": "zonal"}),
     storage_class("zonal", topologies=[{ZONE: ["z1"]}]),
     Claim("d", terms=((IN_Z1,),), where="StorageClass zonal's allowedTopologies", modes=(RWX,))),
])
def test_an_unbound_claim_of_a_wait_for_first_consumer_class_goes_where_the_class_provisions(claim, storage, expected):
    assert read_claim("d", claim.obj(), storage_class=storage) == expected


@pytest.mark.parametrize("claim,storage,why", [
    (make_claim("d").of_class("fast"), storage_class("fast", binding="Immediate"),
     "claim d is not bound to a volume (StorageClass fast binds it at once): no pod of it is scheduled until then"),
    (make_claim("d").of_class("gone"), None,
     "claim d is not bound to a volume (StorageClass gone does not exist): no pod of it is scheduled until then"),
    (make_claim("d"), UNREAD,
     "claim d is not bound to a volume (it names no StorageClass): no pod of it is scheduled until then"),
])
def test_an_unbound_claim_of_immediate_binding_waits(claim, storage, why):
    assert read_claim("d", claim.obj(), storage_class=storage) == Claim("d", modes=(RWX,), pending=why)


def test_a_binding_not_complete_yet_waits_on_the_volume_it_names():
    prebound = make_claim("d").obj()
    prebound["spec"]["volumeName"] = "pv-1"
    assert read_claim("d", prebound, make_volume("pv-1").on_nodes(ZONE, "z1").obj()) == Claim(
        "d", terms=((IN_Z1,),), where="PersistentVolume pv-1's node affinity", modes=(RWX,),
        pending="claim d is not bound to PersistentVolume pv-1 yet")


def test_a_class_that_cannot_be_read_restricts_nothing():
    assert read_claim("d", make_claim("d").of_class("gp3").obj(), storage_class=UNREAD) == Claim("d", modes=(RWX,))


def test_a_claim_no_pod_can_mount_is_unusable_and_a_missing_one_not_found():
    deleting = make_claim("d").bound_to("pv-1").obj()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-02T12:00:00Z"
    lost = make_claim("d").bound_to("pv-1").obj()
    lost["status"]["phase"] = "Lost"
    with pytest.raises(Unusable, match="claim d is being deleted"):
        read_claim("d", deleting, make_volume("pv-1").obj())
    for claim, volume in ((lost, UNREAD), (make_claim("d").bound_to("pv-1").obj(), None)):
        with pytest.raises(Unusable, match="claim d is bound to PersistentVolume pv-1, which does not exist"):
            read_claim("d", claim, volume)
    with pytest.raises(LookupError):
        read_claim("d", None)


@pytest.mark.parametrize("requirement,labels,matches", [
    (Requirement("k", "In", ("a", "b")), {"k": "b"}, True),
    (Requirement("k", "In", ("a",)), {}, False),
    (Requirement("k", "NotIn", ("a",)), {}, True),
    (Requirement("k", "NotIn", ("a",)), {"k": "a"}, False),
    (Requirement("k", "Exists"), {"k": ""}, True),
    (Requirement("k", "DoesNotExist"), {"k": ""}, False),
    (Requirement("k", "Gt", ("3",)), {"k": "4"}, True),
    (Requirement("k", "Lt", ("3",)), {"k": "4"}, False),
    (Requirement("k", "Gt", ("3",)), {"k": "x"}, False),
    (Requirement("k", "Near", ("a",)), {"k": "a"}, False),
])
def test_a_requirement_is_the_label_selectors(requirement, labels, matches):
    assert requirement.matches(labels) is matches


def test_node_affinity_as_check_node_affinity_reads_it():
    """On the node's labels alone: a term of matchFields alone matches any node (no field
    is there to refuse it), a term with nothing in it none, and no term at all nothing."""
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    volume = make_volume("pv").node_affinity(by_name).obj()
    assert read_claim("d", make_claim("d").bound_to("pv").obj(), volume).refusal(labelled("n2")) is None
    for terms in ([{}], []):
        claim = read_claim("d", make_claim("d").bound_to("pv").obj(), make_volume("pv").node_affinity(*terms).obj())
        assert claim.refusal(labelled("n1")) == "cannot mount claim d (PersistentVolume pv's node affinity)"


def test_zone_labels_bind_only_nodes_that_have_zone_labels():
    claim = Claim("d", zones=(("failure-domain.beta.kubernetes.io/zone", frozenset({"z1"})),), where="labels")
    assert claim.refusal(labelled("single-zone-cluster")) is None
    assert claim.refusal(labelled("a", {ZONE: "z1"})) is None  # the GA label stands in for the beta one
    assert claim.refusal(labelled("b", {ZONE: "z2"})) == "cannot mount claim d (labels)"
    assert claim.refusal(labelled("c", {"topology.kubernetes.io/region": "r1"})) == "cannot mount claim d (labels)"


def test_a_claim_on_named_nodes_is_never_on_a_new_node():
    assert Claim("d", terms=((Requirement(HOST, "In", ("n1",)),),)).pins_nodes
    assert Claim("d", node_name="n1").pins_nodes
    assert not Claim("d", terms=((IN_Z1,), (Requirement(HOST, "In", ("n1",)),))).pins_nodes


def test_where_a_one_node_claim_is_mounted_the_job_goes_there_only():
    rwo, rwx = Claim("data", modes=(RWO,)), Claim("shared", modes=(RWX,))
    free = {"a": 4, "b": 8, "c": 2}
    assert JobClaims((rwx,), gpus=4).candidates(free) == free
    assert JobClaims((rwo, rwx), gpus=4).candidates(free) == {"a": 4, "b": 8}  # a node holding all of the job
    mounted = job_claims((rwo, rwx), 4, [ClaimUse("data", "notebook", "c"), ClaimUse("shared", "other", "a")])
    assert mounted == JobClaims((rwo, rwx), 4, (ClaimUse("data", "notebook", "c"),))
    assert mounted.candidates(free) == {"c": 2}
    assert mounted.restrictions() == ["claim data (ReadWriteOnce) is mounted by notebook on c: "
                                      "the job's pods go there only"]
    assert not mounted.new_nodes_may_mount() and mounted.lasting() == JobClaims((rwo, rwx), 4)
    # Two one-node claims mounted on two nodes: no node takes the job now.
    both = job_claims((rwo, Claim("more", modes=(RWO,))), 4, [ClaimUse("data", "p", "a"), ClaimUse("more", "q", "b")])
    assert both.candidates(free) == {}


def test_a_read_write_once_pod_claim_in_use_takes_no_pod_of_the_job():
    claims = job_claims((Claim("one", modes=(RWOP,), one_pod=True),), 2, [ClaimUse("one", "other", "a")])
    assert claims.candidates({"a": 8, "b": 8}) == {}
    assert claims.restrictions() == ["claim one (ReadWriteOncePod) is mounted by other on a: "
                                     "no pod of the job until it ends"]


def test_the_pods_that_mount_a_claim_now():
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Running"},
           "spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}, {"name": "e"}]}}
    assert mounted_claims(pod) == {"data"} and mounts_now(pod)
    assert not mounts_now({**pod, "status": {"phase": "Succeeded"}})
    assert not mounts_now({**pod, "metadata": {"name": "p", "deletionTimestamp": "2026-01-02T12:00:00Z"}})


# -- for all claims and nodes ---------------------------------------------------------------
KEYS = ("zone", "rack", HOST)
VALUES = ("a", "b", "c")
expressions = st.fixed_dictionaries({
    "key": st.sampled_from(KEYS), "operator": st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist")),
    "values": st.lists(st.sampled_from(VALUES), min_size=1, max_size=2, unique=True)})
terms = st.lists(st.fixed_dictionaries({"matchExpressions": st.lists(expressions, min_size=1, max_size=2)}),
                 min_size=1, max_size=2)
nodes = st.lists(st.tuples(st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES)), st.integers(0, 8)),
                 min_size=1, max_size=6)


def allowed_by(volume_terms, labels):
    """The PV's raw terms against a node's labels, as written in the API's reference."""
    def holds(e):
        value = labels.get(e["key"])
        return {"In": value in e["values"], "NotIn": value not in e["values"], "Exists": value is not None,
                "DoesNotExist": value is None}[e["operator"]]
    return any(all(holds(e) for e in term["matchExpressions"]) for term in volume_terms)


@settings(max_examples=300, deadline=None)
@given(volume_terms=terms, cluster=nodes, modes=st.sampled_from(((RWO,), (RWX,), (RWOP,))), gpus=st.integers(1, 12))
def test_a_planned_node_always_mounts_every_claim(volume_terms, cluster, modes, gpus):
    """For all claims and nodes: a plan on the free GPUs the claims leave puts every pod on
    a node the PV's terms allow, and all on one node when the volume attaches to one."""
    claim = read_claim("d", make_claim("d").modes(*modes).bound_to("pv").obj(),
                       make_volume("pv").modes(*modes).node_affinity(*volume_terms).obj())
    claims = JobClaims((claim,), gpus)
    labels = {f"n{i}": node_labels for i, (node_labels, _) in enumerate(cluster)}
    free = {name: count for name, (_, count) in zip(labels, cluster)
            if claims.refusal(labelled(name, labels[name])) is None}
    try:
        plan = placement.plan(claims.candidates(free), gpus)
    except placement.InsufficientGPUs:
        return
    assert all(allowed_by(volume_terms, labels[node]) for node, _ in plan)
    assert sum(share for _, share in plan) == gpus
    if modes != (RWX,):
        assert len(plan) == 1
