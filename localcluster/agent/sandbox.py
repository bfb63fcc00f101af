"""A pod's sandbox: its network, hostname, /etc/hosts and volumes on the host.

What a pause container and the CNI plugin provide on a real node: the pod's
address and netns (or the node's, with hostNetwork), the kubelet-managed hosts
file, and the pod directory holding volumes and logs. Containers then join it
(the runtime puts them in its netns and bind-mounts its files). Creation may be retried (a Secret may not exist yet); the
address is allocated once and kept for the pod's life.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from pathlib import Path

from localcluster.agent.network import NodeNetwork, PodNetwork
from localcluster.agent.netns import NETNS_RUN_DIR
from localcluster.agent.volumes import VolumeContext, VolumeObjects, prepare_volumes, unmount_volumes

log = logging.getLogger(__name__)

HOSTNAME_MAX_CHARS = 63
CLUSTER_DOMAIN = "cluster.local"
_HOSTS_HEADER = (
    "# Kubernetes-managed hosts file.\n"
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)


def pod_hostname(pod: dict, node_hostname: str) -> str:
    """The pod's hostname: the node's with hostNetwork, else spec.hostname or the pod name (at most 63 chars).

    A hostNetwork pod sees the machine's hostname, which is the node's hostname label
    and not always the Node's name (EKS: `ip-10-0-1-7`, Node `ip-10-0-1-7.ec2.internal`).
    """
    spec = pod["spec"]
    if spec.get("hostNetwork"):
        return node_hostname
    hostname = spec.get("hostname") or pod["metadata"]["name"]
    return hostname[:HOSTNAME_MAX_CHARS].rstrip("-.") or hostname[:HOSTNAME_MAX_CHARS]


def hosts_file(pod: dict, ip: str, hostname: str) -> str:
    """The kubelet-managed /etc/hosts of a pod (for hostNetwork, the node's name and address)."""
    spec = pod["spec"]
    lines = [_HOSTS_HEADER]
    if spec.get("subdomain") and not spec.get("hostNetwork"):
        fqdn = f"{hostname}.{spec['subdomain']}.{pod['metadata']['namespace']}.svc.{CLUSTER_DOMAIN}"
        lines.append(f"{ip}\t{fqdn}\t{hostname}\n")
    else:
        lines.append(f"{ip}\t{hostname}\n")
    aliases = spec.get("hostAliases") or []
    if aliases:
        lines.append("\n# Entries added by HostAliases.\n")
        lines.extend(f"{alias['ip']}\t{chr(9).join(alias.get('hostnames') or [])}\n" for alias in aliases)
    return "".join(lines)


class Sandbox:
    """The host-side resources of one pod."""

    def __init__(self, pod: dict, node_network: NodeNetwork, pod_dir: Path):
        self._pod = pod
        self._node_network = node_network
        self.pod_dir = pod_dir
        self.hostname = pod_hostname(pod, node_network.node.hostname)
        self.network: PodNetwork | None = None
        self.volume_paths: dict[str, str] = {}
        self._released = False

    @property
    def hosts_path(self) -> Path:
        return self.pod_dir / "etc-hosts"

    @property
    def logs_dir(self) -> Path:
        return self.pod_dir / "logs"

    @property
    def specs_dir(self) -> Path:
        return self.pod_dir / "containers"

    @property
    def netns_path(self) -> str:
        assert self.network is not None
        return f"{NETNS_RUN_DIR}/{self.network.netns}"

    def create(self, objects: VolumeObjects, ca_file: Path, node_allocatable: Mapping[str, str]) -> None:
        """Set up network, hosts file and volumes; raises VolumeError/NetworkError to be retried."""
        self.specs_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        if self.network is None:
            if self._pod["spec"].get("hostNetwork"):
                self.network = self._node_network.host_network
            else:
                network = self._node_network.allocate()
                try:
                    self._node_network.set_up(network)
                except Exception:
                    self._node_network.release(network)
                    raise
                self.network = network
        self.hosts_path.write_text(hosts_file(self._pod, self.network.ip, self.hostname))
        context = VolumeContext(
            pod_ip=self.network.ip, host_ip=self._node_network.node.ip, ca_file=ca_file,
            node_allocatable=node_allocatable,
        )
        self.volume_paths = prepare_volumes(self._pod, self.pod_dir / "volumes", objects, context)

    def release_network(self) -> None:
        """Give the address back and remove the netns (the pod keeps its IP in status, as on a node)."""
        if self.network is not None and not self._released:
            self._node_network.release(self.network)
            self._released = True

    def remove_files(self) -> None:
        unmount_volumes(self.pod_dir / "volumes")
        shutil.rmtree(self.pod_dir, ignore_errors=True)
