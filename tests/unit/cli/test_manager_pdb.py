"""docs/manager-pdb.yaml: a valid PodDisruptionBudget that selects every manager pod,
as users apply it (manager.yaml, manager-job.yaml) or submit it, and no pod of a job.
(Checked here without a server: the fields the Eviction API acts on, and the selector.)"""

from pathlib import Path

import pytest
import yaml

from distributetrain.cli.jobs import manager_spec
from distributetrain.core.pods import manifests
from distributetrain.core import names
from distributetrain.core.settings import JobSettings

REPO = Path(__file__).resolve().parents[3]
SETTINGS = JobSettings(job_name="demo", namespace="default", num_gpus=2, image="img:1", owner_uid="u")
OPTIONS = manager_spec.ManagerOptions()


def pdb():
    (document,) = yaml.safe_load_all((REPO / "docs" / "manager-pdb.yaml").read_text())
    return document


def selects(budget, pod_metadata):
    selector = budget["spec"]["selector"]
    assert set(selector) == {"matchLabels"}, "only matchLabels is evaluated here"
    labels = pod_metadata.get("labels") or {}
    return all(labels.get(key) == value for key, value in selector["matchLabels"].items())


def from_file(name):
    obj = yaml.safe_load((REPO / name).read_text())
    return obj["spec"]["template"]["metadata"] if obj["kind"] == "Job" else obj["metadata"]


def test_it_is_a_budget_that_refuses_every_eviction_of_a_bare_or_job_pod():
    budget = pdb()
    assert (budget["apiVersion"], budget["kind"]) == ("policy/v1", "PodDisruptionBudget")
    assert set(budget["metadata"]) == {"name", "namespace"} and set(budget["spec"]) == {"minAvailable", "selector"}
    # An integer: the only form the disruption controller applies to pods without a
    # scalable controller; evictions allowed = running managers - minAvailable.
    assert isinstance(budget["spec"]["minAvailable"], int) and budget["spec"]["minAvailable"] >= 10_000
    # In the namespace manager.yaml uses, so the two apply together.
    manager_yaml = yaml.safe_load((REPO / "manager.yaml").read_text())
    assert budget["metadata"]["namespace"] == manager_yaml["metadata"]["namespace"]


@pytest.mark.parametrize("manager", [
    pytest.param(lambda: from_file("manager.yaml"), id="manager.yaml"),
    pytest.param(lambda: from_file("manager-job.yaml"), id="manager-job.yaml"),
    pytest.param(lambda: manager_spec.manager_pod(SETTINGS, OPTIONS)["metadata"], id="submit"),
    pytest.param(lambda: manager_spec.manager_job(SETTINGS, OPTIONS)["spec"]["template"]["metadata"],
                 id="submit-as-job"),
])
def test_it_selects_every_manager_pod(manager):
    assert selects(pdb(), manager())


def test_it_selects_no_pod_of_a_job():
    assert not selects(pdb(), manifests.worker_pod(SETTINGS, 0, "n", 1)["metadata"])
    assert not any(selects(pdb(), {"labels": names.job_labels("demo", role)})
                   for role in (names.ROLE_CHIEF, names.ROLE_WORKER))
