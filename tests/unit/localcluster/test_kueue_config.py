"""Kueue's set-up on the local cluster, from Kueue's own manifests at the pinned version."""

import base64
import os
import re
from pathlib import Path

import pytest

from localcluster import kueue
from prerequisites import unavailable

GO_MOD = Path(__file__).resolve().parents[3] / "localcluster" / "kueuecontroller" / "go.mod"


@pytest.fixture(scope="module")
def module_dir():
    version = re.search(r"^require sigs.k8s.io/kueue (\S+)$", GO_MOD.read_text(), re.M).group(1)
    cache = Path(os.environ.get("DT_CACHE", Path.home() / ".cache" / "distributetrain"))
    found = cache / "gomod" / f"sigs.k8s.io/kueue@{version}"
    if not found.is_dir():
        unavailable(f"Kueue's module source {found} is missing: make setup downloads it")
    return found


def test_only_kueue_s_own_and_the_pod_webhooks_are_registered_on_loopback(module_dir):
    manifests = (module_dir / "config/components/webhook/manifests.yaml").read_text()
    configurations = kueue.webhook_configurations(manifests, b"the CA")
    assert [c["kind"] for c in configurations] == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    webhooks = {w["name"]: w for c in configurations for w in c["webhooks"]}
    assert {"mpod.kb.io", "vpod.kb.io", "mworkload.kb.io", "vclusterqueue.kb.io"} <= set(webhooks)
    assert not {name for name in webhooks if name.startswith(("mjob.", "mjobset.", "mraycluster."))}
    for webhook in webhooks.values():
        assert webhook["clientConfig"]["url"].startswith(f"https://127.0.0.1:{kueue.WEBHOOK_PORT}/")
        assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == b"the CA"
        assert webhook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kueue-system"]
    assert webhooks["mpod.kb.io"]["clientConfig"]["url"].endswith("/mutate--v1-pod")


def test_every_crd_of_the_module_is_installed(module_dir):
    crds = kueue.custom_resource_definitions((module_dir / "config/components/crd/bases").glob("*.yaml"))
    kinds = {crd["spec"]["names"]["kind"] for crd in crds}
    assert {"ClusterQueue", "LocalQueue", "Workload", "ResourceFlavor", "WorkloadPriorityClass"} <= kinds


def test_the_configuration_serves_webhooks_on_loopback_and_no_metrics():
    config = kueue.configuration(Path("/run/certs"))
    assert config["webhook"] == {"host": "127.0.0.1", "port": kueue.WEBHOOK_PORT, "certDir": "/run/certs"}
    assert config["metrics"] == {"bindAddress": "0"} and config["integrations"] == {"frameworks": ["pod"]}


def test_by_default_kueue_manages_pods_that_name_a_queue_outside_its_own_namespaces():
    config = kueue.configuration(Path("/run/certs"))
    assert config["manageJobsWithoutQueueName"] is False
    assert config["managedJobsNamespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}]}


def test_a_platform_that_queues_every_pod_of_its_namespaces():
    config = kueue.configuration(Path("/run/certs"), every_pod_of={"team": "ml"})
    assert config["manageJobsWithoutQueueName"] is True
    assert config["managedJobsNamespaceSelector"] == {"matchLabels": {"team": "ml"}}


def test_the_visibility_api_is_served_on_the_bridge_behind_kueue_s_api_services_trusting_the_cluster_ca(module_dir):
    config = kueue.configuration(Path("/run/certs"))
    assert config["visibilityServer"] == {"bindAddress": "10.233.0.1", "bindPort": kueue.VISIBILITY_PORT}
    assert "featureGates" not in config  # VisibilityOnDemand stays on
    manifests = [p.read_text() for p in sorted((module_dir / "config/components/visibility").glob("apiservice_*.yaml"))]
    assert kueue.visibility_api_services(manifests, b"the CA") == [
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": f"{version}.visibility.kueue.x-k8s.io"},
         "spec": {"group": "visibility.kueue.x-k8s.io", "groupPriorityMinimum": 100, "version": version,
                  "versionPriority": 100, "caBundle": base64.b64encode(b"the CA").decode(),
                  "service": {"namespace": "kueue-system", "name": "visibility-server", "port": 443}}}
        for version in ("v1beta1", "v1beta2")]
    service, endpoints = kueue.visibility_service()
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "protocol": "TCP",
                                         "targetPort": kueue.VISIBILITY_PORT}]
    assert "selector" not in service["spec"]
    assert endpoints["subsets"] == [{"addresses": [{"ip": "10.233.0.1"}],
                                     "ports": [{"name": "https", "port": kueue.VISIBILITY_PORT, "protocol": "TCP"}]}]
    assert kueue.visibility_dns_name() == "visibility-server.kueue-system.svc"
