"""How the manager connects to the Kubernetes API: credentials, timeouts, connections.

- Every request has a connect and a read timeout (``ApiTimeouts``), applied in the REST
  layer so no call can go without, and urllib3's own retries are off: ``calls.call`` is
  the one retry loop.
- Connections are pooled (enough for the requests in flight) and kept alive with TCP
  keepalive, so a connection whose peer vanished is never reused to wait out a timeout.
- The manager acts as its pod's ServiceAccount; the user's commands as kubectl would.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, fields

import urllib3
from kubernetes import client, config
from kubernetes.client import rest
from kubernetes.config import incluster_config

from distributetrain.core import errors

ENV_PREFIX = "DISTRIBUTETRAIN_API_"  # + an ApiTimeouts field in capitals overrides it


@dataclass(frozen=True)
class ApiTimeouts:
    """How long the manager waits on the Kubernetes API. Seconds.

    ``DISTRIBUTETRAIN_API_<FIELD>`` in the environment overrides a field (e.g.
    ``DISTRIBUTETRAIN_API_RETRY_DEADLINE_S=2``): the black-box tests use short ones to
    show an unresponsive apiserver costs a bounded time.
    """

    # TCP connect plus TLS handshake. A lost SYN is resent after 1 s and 3 s; beyond that
    # a fresh connection (call retries) is quicker than the kernel's next resend at 7 s.
    connect_s: float = 5.0
    # Longest silence within one non-watch response; the apiserver gives up on its own
    # requests after 60 s, but a page of 2,000 pods or a create answers in well under 1 s.
    read_s: float = 30.0
    # Transient failures are retried this long: it rides out an apiserver restart.
    retry_deadline_s: float = 90.0
    # Each watch request asks the server to end it after this (timeoutSeconds, whole
    # seconds); the apiserver sends a bookmark 2 s before, and the watch resumes at once.
    watch_chunk_s: float = 4.0
    # A watch silent this long past its chunk's end is stalled: reconnect. Chunk plus
    # slack (6 s) bounds how late an event can be seen on a stalled connection.
    watch_read_slack_s: float = 2.0

    @property
    def request(self) -> tuple[float, float]:
        """The (connect, read) pair urllib3 honours for a non-watch request."""
        return self.connect_s, self.read_s

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> ApiTimeouts:
        changes = {}
        for field in fields(cls):
            name = ENV_PREFIX + field.name.upper()
            if name in environ:
                changes[field.name] = _positive_seconds(name, environ[name])
        return cls(**changes)


def _positive_seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < math.inf:
        raise errors.UsageError(name, f"must be a positive number of seconds, e.g. 2.5, got {text!r}")
    return value


# jobs.api passes this as its read timeout; the REST layer applies it anyway.
API_REQUEST_TIMEOUT_S = ApiTimeouts.read_s
# Creates and deletes of a job's pods are sent this many at a time: each is one round trip
# waiting mostly on etcd, so overlapping them is what makes 64 workers cost about 16.
API_CONCURRENCY = 8
# Connections kept open to the API server: the creates or deletes in flight, plus the pod
# watch, the Event sender and the annotation writer. urllib3 closes a connection returned
# to a full pool, and the next request pays a new TCP and TLS handshake.
API_CONNECTIONS = API_CONCURRENCY + 3
# Keepalive probes on idle connections: a pooled connection whose peer vanished without a
# FIN (node or netns gone) is reset after about 30 s, and so never reused to wait out a
# read timeout. Socket options missing on this platform are skipped.
TCP_KEEPALIVE_IDLE_S = 15
TCP_KEEPALIVE_INTERVAL_S = 5
TCP_KEEPALIVE_PROBES = 3
KEEPALIVE_SOCKET_OPTIONS = urllib3.connection.HTTPConnection.default_socket_options + [
    (level, getattr(socket, name), value)
    for level, name, value in (
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", TCP_KEEPALIVE_IDLE_S),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", TCP_KEEPALIVE_INTERVAL_S),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", TCP_KEEPALIVE_PROBES),
    )
    if hasattr(socket, name)
]


class TimedRestClient(rest.RESTClientObject):
    """The client's REST layer with a timeout on every request, and TCP keepalive.

    The generated client turns ``_request_timeout`` into a urllib3 timeout only for an
    int or a (connect, read) tuple; anything else, a float included, silently means no
    timeout at all. Here a tuple passes as it is, a number is the read timeout, and no
    timeout gets ``timeouts.request``.
    """

    def __init__(self, configuration: client.Configuration, timeouts: ApiTimeouts):
        super().__init__(configuration)
        self.timeouts = timeouts
        # Pools are created on first use, each from these keyword arguments.
        self.pool_manager.connection_pool_kw["socket_options"] = KEEPALIVE_SOCKET_OPTIONS

    def request(self, method, url, *args, _request_timeout=None, **kwargs):
        if isinstance(_request_timeout, tuple):
            timeout = _request_timeout
        elif _request_timeout:
            timeout = (self.timeouts.connect_s, float(_request_timeout))
        else:
            timeout = self.timeouts.request
        return super().request(method, url, *args, _request_timeout=timeout, **kwargs)


def make_api_client(configuration: client.Configuration, timeouts: ApiTimeouts | None = None) -> client.ApiClient:
    """An ApiClient whose every request has a timeout and is tried once (``call`` retries)."""
    # urllib3 would otherwise retry 3 times on its own: unlogged, each costing a timeout.
    configuration.retries = False
    # The client takes HTTPS_PROXY from the environment but drops NO_PROXY (kubernetes
    # 34.1.0, kubernetes-client/python#2460): a platform's proxy variables would send every
    # API call through its proxy, the cluster's own address included.
    if configuration.no_proxy is None:
        configuration.no_proxy = os.environ.get("NO_PROXY") or os.environ.get("no_proxy")
    configuration.connection_pool_maxsize = API_CONNECTIONS
    api_client = client.ApiClient(configuration)
    api_client.rest_client = TimedRestClient(configuration, timeouts or ApiTimeouts.from_environment())
    return api_client


def kubeconfig_path() -> str:
    """kubectl's default: ``$KUBECONFIG`` (files joined by ':'), else ~/.kube/config. Read
    at each call: the client library reads ``$KUBECONFIG`` once, when it is imported."""
    return os.environ.get("KUBECONFIG") or "~/.kube/config"


def uses_in_cluster(kubeconfig: str | None, context: str | None, *, in_cluster_first: bool) -> bool:
    """Whether ``load_api_client`` acts as the pod's ServiceAccount rather than a kubeconfig.

    ``in_cluster_first``: the manager, whose pod acts as its own ServiceAccount whatever
    files its image holds and whatever its arguments say: ``--kubeconfig`` and ``--context``
    are for outside a pod (a kubeconfig's exec plugin would run any command, next to the
    token). Otherwise kubectl's order, for the user's commands (the CLI and the kubectl
    plugin in a notebook pod act as its user): ``--kubeconfig``, ``$KUBECONFIG``,
    ~/.kube/config, and the ServiceAccount only when none exists.
    """
    # client-go's InClusterConfig.Possible(): the service's env and the token file.
    in_a_pod = all(os.environ.get(name) for name in (incluster_config.SERVICE_HOST_ENV_NAME,
                                                     incluster_config.SERVICE_PORT_ENV_NAME))
    if not in_a_pod or not os.path.isfile(incluster_config.SERVICE_TOKEN_FILENAME):
        return False
    if in_cluster_first:
        return True
    if kubeconfig is not None or context is not None:
        return False
    return not any(
        os.path.exists(os.path.expanduser(path)) for path in kubeconfig_path().split(os.pathsep) if path)


def load_api_client(
    kubeconfig: str | None = None, context: str | None = None, *, in_cluster_first: bool = False
) -> client.ApiClient:
    """The pod's ServiceAccount or a kubeconfig, as ``uses_in_cluster`` decides."""
    configuration = client.Configuration()
    if uses_in_cluster(kubeconfig, context, in_cluster_first=in_cluster_first):
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=kubeconfig or kubeconfig_path(), context=context,
                                client_configuration=configuration)
    return make_api_client(configuration)
