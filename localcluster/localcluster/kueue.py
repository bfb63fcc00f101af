"""Kueue on the local cluster (`localcluster up --kueue`): its CRDs, its webhooks and its
controller manager, as a cluster that runs Kueue has them.

Kueue is built from its Go module (localcluster/kueuecontroller) and runs as a host
process, like the control plane. Its webhooks are served on loopback with a certificate
of the cluster's CA and registered by URL (no Service: nothing of Kueue's runs in a
pod). Only the webhooks of Kueue's own objects and of plain pods are registered: the
pod integration is the one distributetrain uses. Its visibility API (pending workloads
and their positions) is an aggregated API: served on the host's bridge address, behind
a Service without selector whose endpoint is that address, as the apiserver's
aggregation layer reaches it. What is read from the module (CRDs, webhook and APIService
manifests) is Kueue's own, at the pinned version, unchanged but for addresses and trust.
"""

from __future__ import annotations

import base64
import copy
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from localcluster import binaries, certs, controllers, netsetup, processes
from localcluster.components import KUEUE
from localcluster.layout import RunLayout, cache_dir
from localcluster.probe import wait_until

READY_TIMEOUT_S = 60.0
WEBHOOK_PORT = 19443
VISIBILITY_PORT = 18082  # not Kueue's default 8082: a host port this cluster claims
VISIBILITY_SERVICE = "visibility-server"  # the name Kueue's APIService manifests give
VISIBILITY_CERT = "kueue-visibility"
# Kueue v0.19.2 reads its visibility server's certificate from this fixed directory.
VISIBILITY_CERT_DIR = "/visibility"
HEALTH_PORT = 18081
NAMESPACE = "kueue-system"
API_GROUP = "kueue.x-k8s.io"
API_VERSION = "v1beta2"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
KUEUE_FINALIZER_PREFIX = "kueue.x-k8s.io/"
WEBHOOK_CERT = "kueue-webhook"  # tls.crt / tls.key in the certificate directory, as controller-runtime wants
# Kueue's own objects and plain pods; not the other integrations' (Jobs, JobSets, Ray...).
WEBHOOK_PATHS = re.compile(r"^/(mutate|validate)-(kueue-x-k8s-io-v1beta2-[a-z]+|-v1-pod)$")
# For pods, namespaces outside Kueue's managedJobsNamespaceSelector are never managed,
# queue name or not ("strong exemption"); inside it, only pods naming a queue are, unless
# manageJobsWithoutQueueName (a platform team's choice, tried by a test of its own).
NEVER_MANAGED = ("kube-system", NAMESPACE)


def start(layout: RunLayout, pki: certs.Pki, api, every_pod_of: Mapping[str, str] | None = None) -> None:
    """Kueue's CRDs, its controller manager (a host process, like the control plane)
    and then its webhooks; idempotent. Returns once Kueue answers /readyz. With
    `every_pod_of`, see `configuration` (a running Kueue keeps its configuration:
    stop it first)."""
    binary = binaries.kueue()
    module = module_dir(binaries.KUEUE_BUILD_SCRIPT.parent / "go.mod", cache_dir() / "gomod")
    certs.ensure_server(pki, WEBHOOK_CERT, "kueue-webhook", ("127.0.0.1",))
    certs.ensure_server(pki, VISIBILITY_CERT, "kueue-visibility", (netsetup.HOST_IP,), (visibility_dns_name(),))
    # tls.crt and tls.key in each directory, as controller-runtime and Kueue read them
    cert_dir, visibility_certs = layout.root / "kueue-certs", layout.root / "kueue-visibility-certs"
    for directory, cert in ((cert_dir, WEBHOOK_CERT), (visibility_certs, VISIBILITY_CERT)):
        directory.mkdir(exist_ok=True)
        shutil.copyfile(pki.cert(cert), directory / "tls.crt")
        shutil.copyfile(pki.key(cert), directory / "tls.key")
    config_file = layout.root / "kueue-config.yaml"
    config_file.write_text(yaml.safe_dump(configuration(cert_dir, every_pod_of)))
    crds = install(api, module)
    wait_until(lambda: established(api, crds), READY_TIMEOUT_S, "Kueue's CRDs to be served")
    etc_overlay = layout.root / "kueue-etc"
    metrics_certs = etc_overlay / "upper" / METRICS_CERT_DIR
    metrics_certs.mkdir(parents=True, exist_ok=True)
    (etc_overlay / "work").mkdir(exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        shutil.copyfile(cert_dir / name, metrics_certs / name)
    root = layout.root / "kueue-root"  # a mount point, inside Kueue's mount namespace only
    root.mkdir(exist_ok=True)
    if processes.read_pid(layout.pid_file(KUEUE)) is None:
        processes.start_detached(command(binary, config_file, layout.kubeconfig, root, visibility_certs, etc_overlay),
                                 layout.pid_file(KUEUE), layout.log_file(KUEUE), cwd=layout.root,
                                 program=str(binary))
    wait_until(ready, READY_TIMEOUT_S, "Kueue's /readyz")
    register_webhooks(api, module, pki.ca_cert.read_bytes())
    api_services = register_visibility(api, module, pki.ca_cert.read_bytes())
    wait_until(lambda: visibility_available(api, api_services), READY_TIMEOUT_S,
               "Kueue's visibility API to be available")


def configuration(cert_dir: Path, every_pod_of: Mapping[str, str] | None = None) -> dict:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for the local cluster. With
    `every_pod_of` (namespace labels), Kueue manages only the namespaces that have them,
    and there every pod, queue name or not (manageJobsWithoutQueueName), as a platform
    team that makes every workload go through a queue configures it."""
    namespaces = ({"matchLabels": dict(every_pod_of)} if every_pod_of is not None else {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(NEVER_MANAGED)}]})
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{HEALTH_PORT}"},
        # "0" turns the metrics server off: v0.19.2 reads its certificate from a fixed
        # path under /etc, which the local cluster has no business writing.
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": WEBHOOK_PORT, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["pod"]},
        "visibilityServer": {"bindAddress": netsetup.HOST_IP, "bindPort": VISIBILITY_PORT},
        "manageJobsWithoutQueueName": every_pod_of is not None,
        "managedJobsNamespaceSelector": namespaces,
    }


def webhook_configurations(manifests: str, ca_pem: bytes) -> list[dict]:
    """Kueue's webhook configurations with only its own and the pod webhooks, each
    addressed by URL on loopback and trusting the cluster CA."""
    selected = []
    for document in yaml.safe_load_all(manifests):
        if not document:
            continue
        configuration_ = copy.deepcopy(document)
        configuration_["metadata"] = {"name": f"kueue-{document['kind'].removesuffix('Configuration').lower()}"}
        configuration_["webhooks"] = [_local(webhook, ca_pem) for webhook in document["webhooks"]
                                      if WEBHOOK_PATHS.match(webhook["clientConfig"]["service"]["path"])]
        selected.append(configuration_)
    return selected


def _local(webhook: dict, ca_pem: bytes) -> dict:
    local = copy.deepcopy(webhook)
    path = webhook["clientConfig"]["service"]["path"]
    local["clientConfig"] = {"url": f"https://127.0.0.1:{WEBHOOK_PORT}{path}",
                             "caBundle": base64.b64encode(ca_pem).decode()}
    local["namespaceSelector"] = {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(NEVER_MANAGED)}]}
    return local


def visibility_api_services(manifests: Iterable[str], ca_pem: bytes) -> list[dict]:
    """Kueue's APIServices of its visibility API, trusting the cluster CA (its manifests
    skip verification, with the self-signed certificate Kueue makes when it manages its
    own)."""
    services = []
    for manifest in manifests:
        api_service = copy.deepcopy(yaml.safe_load(manifest))
        spec = api_service["spec"]
        spec.pop("insecureSkipTLSVerify", None)
        spec["caBundle"] = base64.b64encode(ca_pem).decode()
        spec["service"] = {"namespace": NAMESPACE, "name": VISIBILITY_SERVICE, "port": 443}
        services.append(api_service)
    return services


def visibility_service() -> tuple[dict, dict]:
    """The Service the APIServices name, without selector, and its one endpoint: the
    visibility server on the host's bridge address (an endpoint may not be loopback)."""
    metadata = {"name": VISIBILITY_SERVICE, "namespace": NAMESPACE}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": metadata,
               "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                   "targetPort": VISIBILITY_PORT}]}}
    endpoints = {"apiVersion": "v1", "kind": "Endpoints", "metadata": metadata,
                 "subsets": [{"addresses": [{"ip": netsetup.HOST_IP}],
                              "ports": [{"name": "https", "port": VISIBILITY_PORT, "protocol": "TCP"}]}]}
    return service, endpoints


def visibility_dns_name() -> str:
    """The name the aggregation layer checks the visibility server's certificate for."""
    return f"{VISIBILITY_SERVICE}.{NAMESPACE}.svc"


def register_visibility(api_client, module: Path, ca_pem: bytes) -> list[str]:
    """The visibility API's Service, endpoint and APIServices, idempotently; returns the
    APIServices' names."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    registration = client.ApiregistrationV1Api(api_client)
    service, endpoints = visibility_service()
    try:
        core.create_namespaced_service(NAMESPACE, service)
    except client.ApiException as error:
        if error.status != 409:  # the same Service, from an earlier start
            raise
    controllers.create_or_replace(lambda: core.create_namespaced_endpoints(NAMESPACE, endpoints),
                       lambda version: core.replace_namespaced_endpoints(
                           VISIBILITY_SERVICE, NAMESPACE, controllers.with_version(endpoints, version)),
                       lambda: core.read_namespaced_endpoints(VISIBILITY_SERVICE, NAMESPACE))
    manifests = [path.read_text() for path in sorted((module / "config/components/visibility").glob("apiservice_*.yaml"))]
    api_services = visibility_api_services(manifests, ca_pem)
    for api_service in api_services:
        name = api_service["metadata"]["name"]
        controllers.create_or_replace(lambda: registration.create_api_service(api_service),
                           lambda version: registration.replace_api_service(
                               name, controllers.with_version(api_service, version)),
                           lambda: registration.read_api_service(name))
    return [api_service["metadata"]["name"] for api_service in api_services]


def visibility_available(api_client, names: Iterable[str]) -> bool:
    """Whether the aggregation layer reaches Kueue's visibility API (each APIService Available)."""
    from kubernetes import client

    registration = client.ApiregistrationV1Api(api_client)
    return controllers.all_have_condition(registration.read_api_service, names, "Available")


def unregister_visibility(api_client) -> None:
    """Without Kueue running, its APIServices would be unavailable, and the namespace
    controller cannot delete any namespace while an aggregated API fails discovery."""
    from kubernetes import client

    registration = client.ApiregistrationV1Api(api_client)
    for api_service in registration.list_api_service().items:
        if api_service.spec.group == VISIBILITY_GROUP:
            try:
                registration.delete_api_service(api_service.metadata.name)
            except client.ApiException as error:
                if error.status != 404:
                    raise


def custom_resource_definitions(crd_files: Iterable[Path]) -> list[dict]:
    return controllers.read_crds(sorted(crd_files))


# Without internal certificate management, Kueue v0.19.2 reads its metrics server's
# certificate from this fixed path at start-up, even with the metrics server off.
METRICS_CERT_DIR = "kueue/metrics/certs"  # under /etc

# Kueue runs in a mount namespace of its own, chrooted into a root on a tmpfs that holds
# a bind mount of each of the host's top-level entries (symlinks copied) and the two
# fixed paths Kueue reads: /visibility, and /etc with an overlay adding the metrics
# certificate. The host's / and /etc are left alone.
ROOT_SCRIPT = r"""
root=$1 visibility=$2 etc_upper=$3 etc_work=$4; shift 4
mount -t tmpfs localcluster-kueue-root "$root"
for entry in /*; do
  target="$root/${entry#/}"
  if [ -L "$entry" ]; then ln -s "$(readlink "$entry")" "$target"
  elif [ -d "$entry" ]; then mkdir "$target" && mount --rbind "$entry" "$target"
  else : > "$target" && mount --bind "$entry" "$target"
  fi || exit 1
done
mkdir "$root/visibility" && mount --bind "$visibility" "$root/visibility" &&
mount -t overlay localcluster-kueue-etc -o "lowerdir=/etc,upperdir=$etc_upper,workdir=$etc_work" "$root/etc" &&
exec chroot "$root" "$@"
"""


def command(binary: Path, config_file: Path, kubeconfig: Path, root: Path, visibility_certs: Path,
            etc_overlay: Path) -> list[str]:
    """Kueue in its own root (ROOT_SCRIPT) on the empty directory `root`, with
    `visibility_certs` at /visibility and /etc overlaid from `etc_overlay` (``upper``
    holding kueue/metrics/certs, ``work``). Paths are absolute: the host's are the same
    inside."""
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", ROOT_SCRIPT, "sh",
            str(root), str(visibility_certs), str(etc_overlay / "upper"), str(etc_overlay / "work"),
            str(binary), f"--config={config_file}", f"--kubeconfig={kubeconfig}"]


def module_dir(binary_go_mod: Path, gomodcache: Path) -> Path:
    """Kueue's module source at the version the wrapper pins (its CRDs and webhooks)."""
    version = re.search(r"^require sigs.k8s.io/kueue (\S+)$", binary_go_mod.read_text(), re.M).group(1)
    return gomodcache / f"sigs.k8s.io/kueue@{version}"


def install(api_client, module: Path) -> list[str]:
    """Kueue's namespace and CRDs (created or replaced), idempotently; returns the CRDs' names."""
    crds = custom_resource_definitions((module / "config/components/crd/bases").glob("*.yaml"))
    return controllers.install_crds(api_client, NAMESPACE, crds)


def established(api_client, crd_names: Iterable[str]) -> bool:
    """Whether the API server serves every one of these CRDs: Kueue exits at start-up when
    one of its kinds is not served yet (a cluster's first start)."""
    return controllers.crds_established(api_client, crd_names)


def register_webhooks(api_client, module: Path, ca_pem: bytes) -> None:
    """Once Kueue serves them: its webhooks fail closed, so registered before it answers
    they would refuse every pod of every namespace."""
    from kubernetes import client

    admission = client.AdmissionregistrationV1Api(api_client)
    calls = {
        "MutatingWebhookConfiguration": (admission.create_mutating_webhook_configuration,
                                         admission.replace_mutating_webhook_configuration,
                                         admission.read_mutating_webhook_configuration),
        "ValidatingWebhookConfiguration": (admission.create_validating_webhook_configuration,
                                           admission.replace_validating_webhook_configuration,
                                           admission.read_validating_webhook_configuration),
    }
    manifests = (module / "config/components/webhook/manifests.yaml").read_text()
    for configuration_ in webhook_configurations(manifests, ca_pem):
        create, replace, read = calls[configuration_["kind"]]
        name = configuration_["metadata"]["name"]
        controllers.create_or_replace(lambda: create(configuration_),
                           lambda version: replace(name, controllers.with_version(configuration_, version)),
                           lambda: read(name))


def unregister_webhooks(api_client) -> None:
    """Without Kueue running, its fail-closed pod webhooks would refuse every pod."""
    from kubernetes import client

    admission = client.AdmissionregistrationV1Api(api_client)
    for delete, name in ((admission.delete_mutating_webhook_configuration, "kueue-mutatingwebhook"),
                         (admission.delete_validating_webhook_configuration, "kueue-validatingwebhook")):
        try:
            delete(name)
        except client.ApiException as error:
            if error.status != 404:
                raise


def release_finalizers(api_client) -> list[str]:
    """Once Kueue is stopped: take its finalizers off the pods and Workloads that still
    carry them, which nothing would remove any more (their namespaces could never be
    deleted). Returns what was released, as kind/namespace/name."""
    from kubernetes import client

    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    released = []
    for pod in controllers.every_pod_metadata(api_client):
        kept = controllers.finalizers_without(pod.get("finalizers"), KUEUE_FINALIZER_PREFIX)
        if kept is not None:
            controllers.ignore_gone(lambda: core.patch_namespaced_pod(pod["name"], pod["namespace"],
                                                                      {"metadata": {"finalizers": kept or None}}))
            released.append(f"pod/{pod['namespace']}/{pod['name']}")
    for workload in controllers.all_objects(custom, API_GROUP, API_VERSION, "workloads"):
        metadata = workload["metadata"]
        kept = controllers.finalizers_without(metadata.get("finalizers"), KUEUE_FINALIZER_PREFIX)
        if kept is not None:
            controllers.ignore_gone(lambda: custom.patch_namespaced_custom_object(
                API_GROUP, API_VERSION, metadata["namespace"], "workloads", metadata["name"],
                {"metadata": {"finalizers": kept or None}}))
            released.append(f"workload/{metadata['namespace']}/{metadata['name']}")
    return released


def ready() -> bool:
    """Kueue's health endpoint answers /readyz with 200."""
    return controllers.readyz(HEALTH_PORT)
