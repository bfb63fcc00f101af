"""Whose credentials each command uses: the user's commands follow kubectl (--kubeconfig,
$KUBECONFIG, ~/.kube/config, then the pod's ServiceAccount); the manager acts as its pod's
ServiceAccount. Real kubeconfig files and real in-cluster files, in a temporary HOME."""

import pytest
import urllib3
import yaml
from kubernetes.config import incluster_config

from distributetrain.cli import main as cli, jobflags
from distributetrain.cli.jobs import connection
from distributetrain.core import errors
from distributetrain.core.clock import FakeClock
from distributetrain.kube.connection import load_api_client

IN_CLUSTER_HOST = "https://10.96.0.1:443"


def write_kubeconfig(path, server, namespace):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "user",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "the-users-token"}}],
        "contexts": [{"name": "user", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
    }))
    return path


@pytest.fixture
def notebook_pod(tmp_path, monkeypatch):
    """A pod (service env, token, CA, namespace file) whose user also has ~/.kube/config."""
    home = tmp_path / "home"
    write_kubeconfig(home / ".kube" / "config", "https://home-kubeconfig.example:6443", "users-team")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    for name, text in (("token", "the-pods-token"), ("ca.crt", "not checked before connecting"),
                       ("namespace", "notebooks")):
        (account / name).write_text(text)
    # Where kubernetes.config.load_incluster_config looks: the service env and these files.
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))
    monkeypatch.setattr(jobflags, "IN_CLUSTER_NAMESPACE_FILE", str(account / "namespace"))
    return tmp_path


def user_command(*flags):
    return cli.build_parser().parse_args(["list", *flags])


def host_and_token(api_client):
    configuration = api_client.configuration
    return configuration.host, configuration.api_key["authorization"]


def test_the_cli_in_a_pod_acts_as_the_user_of_the_kubeconfig(notebook_pod):
    args = user_command()
    assert host_and_token(connection.connect(args, FakeClock()).api_client) == (
        "https://home-kubeconfig.example:6443", "Bearer the-users-token")
    assert connection.namespace_of(args) == "users-team"


def test_the_manager_in_the_same_pod_acts_as_its_serviceaccount(notebook_pod):
    manager = load_api_client(None, None, in_cluster_first=True)
    assert host_and_token(manager) == (IN_CLUSTER_HOST, "bearer the-pods-token")


def test_the_manager_in_a_pod_ignores_a_kubeconfig_its_arguments_name(notebook_pod):
    """A manager pod's arguments are whatever its creator wrote: a kubeconfig whose exec
    plugin runs a command (here, one leaving a marker) is never read in a pod."""
    marker = notebook_pod / "plugin-ran"
    kubeconfig = write_kubeconfig(notebook_pod / "tenant" / "config", "https://tenant.example:6443", "tenant")
    document = yaml.safe_load(kubeconfig.read_text())
    document["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                             "command": "sh", "args": ["-c", f"touch {marker}"]}}
    kubeconfig.write_text(yaml.safe_dump(document))
    manager = load_api_client(str(kubeconfig), "user", in_cluster_first=True)
    assert host_and_token(manager) == (IN_CLUSTER_HOST, "bearer the-pods-token")
    assert not marker.exists()


def test_a_platforms_no_proxy_keeps_the_api_server_off_its_proxy(notebook_pod, monkeypatch):
    """A platform's webhook gives pods its proxy's variables: the in-cluster API server,
    which NO_PROXY names, is reached directly, anything else through the proxy."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "10.96.0.1,.svc")
    manager = load_api_client(None, None, in_cluster_first=True)
    assert not isinstance(manager.rest_client.pool_manager, urllib3.ProxyManager)
    monkeypatch.setenv("NO_PROXY", "10.0.0.0")
    manager = load_api_client(None, None, in_cluster_first=True)
    assert isinstance(manager.rest_client.pool_manager, urllib3.ProxyManager)


def test_kubeconfig_before_home_and_the_flag_before_both(notebook_pod, monkeypatch):
    env_file = write_kubeconfig(notebook_pod / "env" / "config", "https://from-env.example:6443", "env-team")
    flag_file = write_kubeconfig(notebook_pod / "flag" / "config", "https://from-flag.example:6443", "flag-team")
    # kubectl skips the files of $KUBECONFIG that do not exist and merges the rest.
    monkeypatch.setenv("KUBECONFIG", f"{notebook_pod / 'missing'}:{env_file}")
    args = user_command()
    assert connection.connect(args, FakeClock()).api_client.configuration.host == "https://from-env.example:6443"
    assert connection.namespace_of(args) == "env-team"
    args = user_command("--kubeconfig", str(flag_file))
    assert connection.connect(args, FakeClock()).api_client.configuration.host == "https://from-flag.example:6443"
    assert connection.namespace_of(args) == "flag-team"


def test_without_any_kubeconfig_the_cli_acts_as_the_pods_serviceaccount(notebook_pod, monkeypatch):
    monkeypatch.setenv("HOME", str(notebook_pod / "empty-home"))
    monkeypatch.setenv("KUBECONFIG", str(notebook_pod / "missing"))
    args = user_command()
    assert host_and_token(connection.connect(args, FakeClock()).api_client) == (IN_CLUSTER_HOST, "bearer the-pods-token")
    assert connection.namespace_of(args) == "notebooks"


def test_outside_a_pod_the_manager_uses_the_kubeconfig(notebook_pod, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    manager = load_api_client(None, None, in_cluster_first=True)
    assert manager.configuration.host == "https://home-kubeconfig.example:6443"


def test_an_explicit_kubeconfig_that_does_not_exist_is_bad_input(notebook_pod):
    with pytest.raises(errors.UsageError) as raised:
        connection.connect(user_command("--kubeconfig", str(notebook_pod / "nope")), FakeClock())
    assert raised.value.flag == "--kubeconfig"
