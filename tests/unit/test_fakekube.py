"""The unit tests' stand-in for Kube answers the same calls with the same signatures."""

import inspect

import pytest

from distributetrain.cli.jobs.api import JobsKube
from distributetrain.core import errors, names
from distributetrain.core.clock import FakeClock
from distributetrain.kube.api import KubeApi
from distributetrain.kube.client import Kube
from harness.builders import make_node, make_pod
from harness.kube import FakeKube

API = sorted(name for name, member in vars(KubeApi).items() if inspect.isfunction(member) and not name.startswith("_"))


def test_the_protocol_is_every_public_call_of_kube():
    public = sorted(name for name, member in vars(Kube).items() if inspect.isfunction(member) and not name.startswith("_"))
    assert public == API


@pytest.mark.parametrize("name", API)
def test_kube_and_the_fake_match_the_protocol(name):
    wanted = inspect.signature(getattr(KubeApi, name))
    assert inspect.signature(getattr(Kube, name)) == wanted
    assert inspect.signature(getattr(FakeKube, name)) == wanted


def test_writes_are_recorded_in_order():
    kube = FakeKube()
    kube.create_all_owned([{"kind": "Secret", "metadata": {"name": "s"}}, {"kind": "Pod", "metadata": {"name": "p"}}])
    kube.patch("Pod", "ml", "demo", {"metadata": {"annotations": {"a": "1"}}})
    kube.delete_all("Pod", "ml", ["p", "gone"])
    kube.patch("Pod", "ml", "demo", {"metadata": {"annotations": {"a": None}}})
    assert kube.actions == [("create", "Secret", "s"), ("create", "Pod", "p"), ("annotate", "Pod", "demo"),
                            ("delete", "Pod", "p"), ("annotate", "Pod", "demo")]
    assert kube.writes("create") == ["s", "p"] and kube.manager["metadata"]["annotations"] == {}
    assert kube.annotation_history("a") == ["1", None]


JOBS_API = sorted(name for name, member in vars(JobsKube).items() if inspect.isfunction(member) and not name.startswith("_"))


@pytest.mark.parametrize("name", JOBS_API)
def test_the_fake_answers_the_user_commands_calls_with_their_signatures(name):
    assert inspect.signature(getattr(FakeKube, name)) == inspect.signature(getattr(JobsKube, name))


def test_deleting_a_manager_deletes_what_it_owns_but_stuck_pods():
    kube = FakeKube(in_manager_pod=False)
    job = {names.LABEL_JOB: "demo"}
    for kind, name, labels in [("Pod", "demo", {}), ("Pod", "demo-chief", job), ("Pod", "demo-worker-0", job),
                               ("Secret", "demo-ssh", job), ("Pod", "other", {names.LABEL_JOB: "other"})]:
        kube.put({"kind": kind, "metadata": {"name": name, "namespace": "ml", "labels": labels}})
    kube.stuck = {"demo-chief"}
    assert kube.delete("Pod", "ml", "demo")
    assert (sorted(kube.pods), kube.secrets, kube.actions) == (["demo-chief", "other"], {}, [("delete", "Pod", "demo")])


def test_every_write_reaches_the_watches_of_its_kind_in_order_at_increasing_versions():
    kube = FakeKube(nodes=[make_node("a").obj()], clock=FakeClock())
    _, listed = kube.list_all("Pod")
    kube.put(make_pod("other").gpus(2).obj(), make_node("a").cordoned().obj())
    kube.create_owned({"kind": "Pod", "metadata": {"name": "p", "labels": {}}, "spec": {}})
    kube.patch("Pod", "ns", "p", {"metadata": {"labels": {"x": "1"}}})
    kube.delete("Pod", "ns", "p")
    kube.remove(make_pod("other").obj())
    seen = [(event, pod["metadata"]["name"], int(pod["metadata"]["resourceVersion"]))
            for event, pod in kube.watch("Pod", None, listed, 60)]
    assert [(event, name) for event, name, _ in seen] == [
        ("ADDED", "other"), ("ADDED", "p"), ("MODIFIED", "p"), ("DELETED", "p"), ("DELETED", "other")]
    versions = [version for _, _, version in seen]
    assert versions == sorted(versions) and int(listed) < versions[0]
    # The node's watch sees the node's write alone; a watch from now on, nothing.
    assert [(event, node["spec"]) for event, node in kube.watch("Node", None, listed, 60)] == [
        ("MODIFIED", {"unschedulable": True})]
    assert list(kube.watch("Pod", None, kube.list_all("Pod")[1], 60)) == []
    # Writes are the code's actions; what others wrote is not.
    assert kube.actions == [("create", "Pod", "p"), ("patch", "Pod", "p"), ("delete", "Pod", "p")]


def test_the_user_commands_writes_reach_the_watches_too_and_a_stale_update_conflicts():
    kube = FakeKube(clock=FakeClock())
    _, listed = kube.list_all("Pod")
    kube.create({"kind": "Pod", "metadata": {"name": "demo", "labels": {}}, "spec": {}})
    assert [(event, pod["metadata"]["name"]) for event, pod in kube.watch("Pod", None, listed, 60)] == [("ADDED", "demo")]
    view = kube.create({"kind": "ConfigMap", "metadata": {"name": "view"}, "data": {}})
    kube.update(view | {"data": {"nodes": "5"}})
    assert [(event, obj["data"]) for event, obj in
            kube.watch("ConfigMap", "default", view["metadata"]["resourceVersion"], 60, field_selector="metadata.name=view")] == [
        ("MODIFIED", {"nodes": "5"})]
    with pytest.raises(errors.Conflict):
        kube.update(view | {"data": {"nodes": "6"}})  # written since it was read
