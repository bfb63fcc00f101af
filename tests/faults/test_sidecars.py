"""A chief whose pod carries a service mesh's proxy, as the kubelet really reports it: the
training container terminates while a classic sidecar runs on (the pod stays Running for
ever) or before the kubelet stops a native one (an init container with restartPolicy
Always). The manager's readings (``podstate``) end the chief with its training
container's exit code either way, and its teardown leaves nothing that holds GPUs: a
chief kept for its logs only once it ends on its own. Then the whole job, with a mesh's
injector (a mutating webhook) in front of the chief."""

import base64
import json
import os
import socket
import ssl
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from kubernetes import client

from distributetrain.cli.main import build_parser
from distributetrain.cli import jobflags
from distributetrain.core import names
from distributetrain.core.placement import podstate
from distributetrain.core.clock import RealClock
from distributetrain.core.settings import JobSettings
from distributetrain.kube.client import Kube
from distributetrain.manager.job import lifecycle
from distributetrain.manager.watching.teardown import tear_down
from harness.apiserver import HttpFake, Reply, Request
from jobharness import LOCAL_MACHINE_FLAGS, SCRIPTS, job_args, node_pool, script_volume

pytestmark = pytest.mark.cluster

IMAGE = "distributetrain/base:0.1.0"  # pre-pulled on every node
TRAINING_EXIT_CODE = 3
FINISH_TIMEOUT_S = 120


def chief(settings: JobSettings, name: str, node: str, native: bool) -> dict:
    proxy = {"name": "istio-proxy", "image": IMAGE, "command": ["sleep", "infinity"]}
    spec = {
        "nodeName": node,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": names.ROLE_CHIEF, "image": IMAGE,
                        "command": ["sh", "-c", f"sleep 2; exit {TRAINING_EXIT_CODE}"]}],
    }
    if native:
        spec["initContainers"] = [proxy | {"restartPolicy": "Always"}]
    else:
        spec["containers"].append(proxy)
    labels = names.job_labels(settings.job_name, names.ROLE_CHIEF, settings.owner_uid)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


@pytest.mark.parametrize("native", [False, True], ids=["classic-sidecar", "native-sidecar"])
def test_a_chief_with_a_sidecar_ends_with_its_training_container(cluster, api_client, namespace, jobs, native):
    settings = JobSettings(job_name="meshed", namespace=namespace, num_gpus=1, image=IMAGE, owner_uid="uid-meshed")
    with node_pool(cluster, {"a": 1}) as pool:
        jobs.core.create_namespaced_pod(namespace, chief(settings, "meshed-chief", pool.node("a"), native))
        ended = jobs.wait_for("meshed-chief", podstate.is_finished, FINISH_TIMEOUT_S)
        assert podstate.exit_code(ended) == TRAINING_EXIT_CODE, ended["status"]
        if native:
            # The kubelet stops the native proxy once the training container is done.
            assert podstate.ends_on_its_own(ended)
            ended = jobs.wait_for("meshed-chief", podstate.has_ended, FINISH_TIMEOUT_S)
            assert podstate.exit_code(ended) == TRAINING_EXIT_CODE
        else:
            assert podstate.phase(ended) == "Running" and not podstate.ends_on_its_own(ended), ended["status"]

        deleted = tear_down(Kube(api_client, RealClock()), settings, keep_chief=True)
        # A classic proxy would run, and hold the chief's GPUs, for ever: the chief goes.
        assert deleted == ([] if native else ["pod/meshed-chief"])
        if not native:
            jobs.wait_gone(["meshed-chief"])


# -- the whole job, with a mesh's injector in front of the chief ------------------------
# The manager's code runs here, in the test's process, against the cluster (as the
# manager pod would run it; the manager image in the cluster may predate this code), and
# serves the chief its hosts on the host's bridge address, which pods reach. A mutating
# webhook in this process plays the mesh: it adds a proxy that never ends to the chief.

HOROVODRUN_FAILED = 1
HOST_ADDRESS = "10.233.0.1"  # localcluster.netsetup.HOST_IP: pods reach the host there


def self_signed(directory) -> tuple[str, str, bytes]:
    """(certificate file, key file, certificate PEM) for 127.0.0.1."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mesh-injector")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(hours=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    (directory / "tls.crt").write_bytes(pem)
    (directory / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    return str(directory / "tls.crt"), str(directory / "tls.key"), pem


def patching_webhook(patch: list[dict], directory) -> tuple[HttpFake, bytes]:
    """An HTTPS admission webhook on 127.0.0.1 that answers every review with ``patch``;
    (the server, to start, and its certificate PEM)."""

    def answer(request: Request) -> Reply:
        return Reply(body={"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": request.json()["request"]["uid"], "allowed": True, "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode()}})

    certificate, key, pem = self_signed(directory)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    return HttpFake(answer, tls=context), pem


@contextmanager
def mesh_injector(api_client, namespace, directory, native: bool):
    """A mutating webhook that injects a proxy into the chief pods of ``namespace``."""
    proxy = {"name": "istio-proxy", "image": IMAGE, "command": ["sleep", "infinity"]}
    patch = ([{"op": "add", "path": "/spec/initContainers", "value": [proxy | {"restartPolicy": "Always"}]}] if native
             else [{"op": "add", "path": "/spec/containers/-", "value": proxy}])
    server, pem = patching_webhook(patch, directory)
    admission = client.AdmissionregistrationV1Api(api_client)
    name = f"mesh-injector-{namespace}"
    with server:
        admission.create_mutating_webhook_configuration({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": "inject.mesh.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "failurePolicy": "Fail", "timeoutSeconds": 5,
                "clientConfig": {"url": f"{server.url}/inject",
                                 "caBundle": base64.b64encode(pem).decode()},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "objectSelector": {"matchLabels": {names.LABEL_ROLE: names.ROLE_CHIEF}},
            }]})
        try:
            yield
        finally:
            admission.delete_mutating_webhook_configuration(name)


def readable_by_all(directory: str) -> Path:
    os.chmod(directory, 0o755)
    return Path(directory)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("native", [False, True], ids=["classic-sidecar", "native-sidecar"])
def test_a_chief_with_an_injected_sidecar_ends_the_job_with_the_trainings_exit_code(
        cluster, api_client, namespace, jobs, tmp_path, monkeypatch, native):
    monkeypatch.setattr("distributetrain.manager.reporting.reporting.TERMINATION_LOG", str(tmp_path / "termination-log"))
    # The job's owner, as the manager pod would be (its pods are garbage without one).
    owner = jobs.core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "meshjob"},
        "spec": {"nodeSelector": {"distributetrain.test/nowhere": "true"},
                 "containers": [{"name": "manager", "image": IMAGE}]}})
    # The chief alone (one GPU): what is under test is how its end is read. Its script
    # where any user of the image reads it (pytest's own directories are root's alone).
    with node_pool(cluster, {"a": 1}) as pool, tempfile.TemporaryDirectory(prefix="dt-mesh-") as readable, \
            script_volume(api_client, namespace, SCRIPTS, readable_by_all(readable)) as claim, \
            mesh_injector(api_client, namespace, tmp_path, native):
        flags = [*LOCAL_MACHINE_FLAGS, *job_args(pool, claim, 1, script_args=(str(TRAINING_EXIT_CODE),))]
        flags, script_args = jobflags.split_script_args(
            ["run", "--job-name=meshjob", f"--namespace={namespace}", f"--owner-uid={owner.metadata.uid}", *flags])
        settings = jobflags.settings_from_args(build_parser().parse_args(flags), script_args).replace(
            discovery_url=f"http://{HOST_ADDRESS}:{free_port()}/hosts", manager_namespace=namespace)
        code = lifecycle.execute(Kube(api_client, RealClock()), settings, "run", RealClock())
        chief_pod = jobs.pod("meshjob-chief")  # a classic proxy's is being deleted: still there
        # horovodrun exits 1 for a rank that failed, whatever the rank's code: the chief's is the job's.
        assert code == HOROVODRUN_FAILED == podstate.exit_code(chief_pod), (chief_pod or {}).get("status")
        assert jobs.secrets("meshjob") == []
        if not native:
            # A classic proxy would hold the chief's GPUs for ever: the chief goes too.
            assert podstate.is_terminating(chief_pod)
            jobs.wait_gone(["meshjob-chief"])
        else:  # kept for its logs, as without a mesh: the kubelet stops the proxy
            ended = jobs.wait_for("meshjob-chief", podstate.has_ended, FINISH_TIMEOUT_S)
            assert [c["name"] for c in ended["spec"]["initContainers"]] == ["istio-proxy"]
