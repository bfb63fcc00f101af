"""One informer per kind in a process: users of the same kind, namespace, selectors and
projection share one list and one watch; each is handed what is held when it joins; the
informer stops with its last user."""

from distributetrain.core.clock import RealClock
from distributetrain.core.placement.projections import watched_node
from distributetrain.kube import sharedinformers
from distributetrain.kube.informer import Satisfied
from distributetrain.kube.sharedinformers import Subscription
from harness.builders import node
from harness.kube import FakeKube


def wait_for(informer, condition) -> None:
    """Until ``condition()`` holds after a change the informer handed on (listed, an event)."""
    outcome = informer.wait_until(lambda store: True if condition() else None, informer.clock.monotonic() + 5)
    assert isinstance(outcome, Satisfied), outcome


def kinds_seen(batches):
    return sorted((change.type, change.key) for batch in batches for change in batch)


def test_two_users_of_the_nodes_share_one_list_and_one_watch():
    kube = FakeKube([node("a"), node("b")], clock=RealClock())
    first, second = [], []
    with Subscription(kube, "Node", keep=watched_node, clock=kube.clock) as one:
        one.add_handler(first.append)
        wait_for(one.informer, lambda: True)
        with Subscription(kube, "Node", keep=watched_node, clock=kube.clock) as other:
            other.add_handler(second.append)
            assert other.informer is one.informer
            # Joining late, it is handed what the informer holds.
            assert kinds_seen(second) == [("ADDED", "a"), ("ADDED", "b")]
            kube.put(node("c"))
            wait_for(one.informer, lambda: len(second) == 2)
            assert kinds_seen(second[1:]) == [("ADDED", "c")]
    assert kinds_seen(first) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    assert kube.node_lists == 1


def test_the_last_user_leaving_stops_the_informer_and_the_next_lists_afresh():
    kube = FakeKube([node("a")], clock=RealClock())
    with Subscription(kube, "Node", keep=watched_node, clock=kube.clock) as one:
        wait_for(one.informer, lambda: True)
    assert sharedinformers.open_informers(kube) == []
    with Subscription(kube, "Node", keep=watched_node, clock=kube.clock) as again:
        assert again.informer is not one.informer
        wait_for(again.informer, lambda: True)
    assert kube.node_lists == 2


def test_another_projection_or_another_client_is_another_informer():
    kube, other_kube = FakeKube([node("a")]), FakeKube([node("a")])
    nodes = Subscription(kube, "Node", keep=watched_node, clock=kube.clock)
    whole = Subscription(kube, "Node", clock=kube.clock)
    elsewhere = Subscription(other_kube, "Node", keep=watched_node, clock=kube.clock)
    assert len({id(nodes.informer), id(whole.informer), id(elsewhere.informer)}) == 3
    assert sharedinformers.open_informers(kube) == [nodes.informer, whole.informer]
    for subscription in (nodes, whole, elsewhere):
        subscription.close()
    assert sharedinformers.open_informers(kube) == []
