"""Every file and command line of one real node, as pure functions of its spec and paths.

Nothing here touches the host: `realnode` writes what these return. Kept in one place
so the exact configuration of the kubelet, the CNI bridge and kube-proxy can be read
(and is tested) as whole documents; containerd's is `containerdconfig`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from localcluster import netsetup
from localcluster.certs import KUBELET_SERVING_CERT, Pki

# Each node has its own network namespace, so every node uses the standard ports.
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
KUBE_PROXY_HEALTHZ_PORT = 10256
KUBE_PROXY_METRICS_PORT = 10249
# The sandbox ("pause") image, pulled from the local registry like any other image.
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"
CLUSTER_DOMAIN = "cluster.local"
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
NETWORK_PREFIX = "localcluster-"
# The extended resource nodes advertise their GPUs as, unless told another.
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class NodeSpec:
    """What a node is: its name, its slot on the network, and what it advertises."""

    name: str
    index: int
    gpus: int
    gpu_resource: str
    # The kubernetes.io/hostname label; differs from the name on EKS-style nodes.
    hostname: str
    labels: Mapping[str, str] = field(default_factory=dict)
    # "key[=value]:Effect", as kubectl taint takes them.
    taints: tuple[str, ...] = ()
    # Extended resources besides `gpus` of `gpu_resource`: a MIG node of the mixed strategy
    # advertises a resource per MIG profile ({"nvidia.com/mig-2g.20gb": 8}).
    more_resources: Mapping[str, int] = field(default_factory=dict)
    # What a cloud instance's kubelet is given (Karpenter's nodes, localcluster/nodeclaims.py):
    # the Node's spec.providerID, and reservations ({"cpu": "100m", "memory": "10Mi"}) and a
    # pod limit that make its allocatable the instance type's rather than the host's.
    provider_id: str = ""
    kube_reserved: Mapping[str, str] = field(default_factory=dict)
    system_reserved: Mapping[str, str] = field(default_factory=dict)
    max_pods: int | None = None
    # Dual-stack pods, IPv6 first: each pod gets an IPv6 and an IPv4 address, and the
    # kubelet (its node IPs IPv6 first) reports the IPv6 one as status.podIP, as on an
    # IPv6 or dual-stack cluster whose primary family is IPv6.
    ipv6_first: bool = False
    # Pods of IPv6 alone, as on an IPv6 cluster (the node itself as ipv6_first): eth0 has an
    # IPv6 address only, all Kubernetes reports. Like EKS's IPv6 clusters, a pod also gets
    # an IPv4 interface for egress alone (eth1, masqueraded to the node's address: see
    # egress_cni_config), by which it reaches the apiserver's IPv4 Service.
    ipv6_only: bool = False
    # GPUs the example DRA driver publishes as devices of DeviceClass gpu.example.com
    # (localcluster/dra.py), beside or instead of `gpus` of `gpu_resource`.
    dra_gpus: int = 0

    @property
    def ipv6(self) -> bool:
        """The node has an IPv6 address, its primary."""
        return self.ipv6_first or self.ipv6_only

    @property
    def ip(self) -> str:
        return netsetup.node_ip(self.index)

    @property
    def ip_v6(self) -> str:
        return netsetup.node_ip_v6(self.index)

    @property
    def node_ips(self) -> list[str]:
        """The kubelet's --node-ip, its primary family first."""
        return [self.ip_v6, self.ip] if self.ipv6 else [self.ip]

    @property
    def pod_subnet(self) -> str:
        return netsetup.pod_subnet(self.index)

    @property
    def netns(self) -> str:
        return netsetup.node_netns(self.index)

    @property
    def host_veth(self) -> str:
        return netsetup.node_host_veth(self.index)

    @property
    def cgroup(self) -> str:
        """The node's cgroup, under every controller's root: its pods and its daemons."""
        return f"{netsetup.NETNS_PREFIX}n{self.index}"


@dataclass(frozen=True)
class NodePaths:
    """Where a node keeps its files: `root` in the run directory, its images in the cache.

    The image store outlives the cluster, as a real node's image cache survives a
    reboot; it starts as a hard-linked copy of the machine's image cache (imagecache.py).
    """

    root: Path
    image_store: Path

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def runc_root(self) -> Path:
        return self.root / "runc"

    @property
    def registry_hosts(self) -> Path:
        """containerd's hosts directory: one hosts.toml per mirrored registry."""
        return self.root / "registry-hosts"

    @property
    def cni_config_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pods"

    @property
    def kube_proxy_config(self) -> Path:
        return self.root / "kube-proxy.yaml"

    @property
    def kube_proxy_kubeconfig(self) -> Path:
        return self.root / "kube-proxy.kubeconfig"

    @property
    def cdi_dir(self) -> Path:
        """The CDI specs the DRA plugin writes and the node's containerd reads (DRA nodes)."""
        return self.root / "cdi"


@dataclass(frozen=True)
class Mirror:
    """The local registry standing in for the registries images name (docker.io, nvcr.io...)."""

    url: str
    registries: tuple[str, ...]


def cni_config(spec: NodeSpec, paths: NodePaths) -> dict:
    """A bridge in the node's netns with the node's pod subnet; the node answers ARP for its
    pods on the cluster bridge (see network.py), so pods reach every node and pod directly."""
    return {
        "cniVersion": "0.4.0",
        "name": network_name(spec),
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": _pod_ranges(spec),
                    "routes": [*([] if spec.ipv6_only else [{"dst": "0.0.0.0/0"}]),
                               *([{"dst": "::/0"}] if spec.ipv6 else [])],
                    "dataDir": str(paths.cni_ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def _pod_ranges(spec: NodeSpec) -> list[list[dict]]:
    v4, v6 = [{"subnet": spec.pod_subnet}], [{"subnet": netsetup.pod_subnet_v6(spec.index)}]
    if spec.ipv6_only:
        return [v6]
    return [v6, v4] if spec.ipv6_first else [v4]


# EKS's IPv6 clusters give pods this IPv4 range for egress, the same on every node
# (the VPC CNI's v4 egress interface), masqueraded to the node's own address.
EGRESS_V4_SUBNET = "169.254.172.0/22"


def egress_cni_config(spec: NodeSpec, paths: NodePaths) -> dict:
    """An ipv6_only node's second network (eth1 in each pod, containerd's max_conf_num):
    IPv4 out of the pod alone, masqueraded to the node's address. Kubernetes reports only
    eth0's addresses, so the pod is IPv6-only to it and to every other pod."""
    return {
        "cniVersion": "0.4.0",
        "name": f"{network_name(spec)}-egress",
        "plugins": [{
            "type": "bridge",
            "bridge": "cni1",
            "isGateway": True,
            "ipMasq": True,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": EGRESS_V4_SUBNET}]],
                     "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(paths.cni_ipam_dir)},
        }],
    }


def network_name(spec: NodeSpec) -> str:
    """The node's CNI network; CNI's result cache in /var/lib/cni is named after it."""
    return f"{NETWORK_PREFIX}{spec.netns}"


# The nodes share this machine's disk with its caches and builds. The upstream thresholds
# are shares of the disk (imagefs.available<15%), which a build machine's disk crosses with
# tens of GB free (252 GB with 40 GB free is 16 %), and every pod of every test would then
# wait on a DiskPressure taint. Absolute ones: a node is short of disk when the machine is.
EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "2Gi", "imagefs.available": "2Gi",
                 "nodefs.inodesFree": "5%"}


def kubelet_config(spec: NodeSpec, paths: NodePaths, pki: Pki) -> dict:
    """The KubeletConfiguration: the upstream defaults but for what this machine needs.

    cgroup v1 with the cgroupfs driver (no systemd here; a later Kubernetes needs cgroup v2),
    no swap check, and the kernel defaults left to the kubelet to set (they are restored by
    `down`). The kubelet API authenticates clients by the cluster CA and asks the apiserver
    who may do what, as on a real cluster. Its serving certificate is the cluster's kubelet
    certificate, valid for every node address.
    """
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # An IPv6-first node is reached at its IPv6 address too: both families.
        "address": "::" if spec.ipv6 else spec.ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "tlsCertFile": str(pki.cert(KUBELET_SERVING_CERT)),
        "tlsPrivateKeyFile": str(pki.key(KUBELET_SERVING_CERT)),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki.ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{spec.cgroup}/pods",
        "failCgroupV1": False,
        "failSwapOn": False,
        "protectKernelDefaults": False,
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "podLogsDir": str(paths.pod_logs),
        "serializeImagePulls": False,
        "registerNode": True,
        "registerWithTaints": [_taint(taint) for taint in spec.taints],
        "resolvConf": "/etc/resolv.conf",
        "clusterDomain": CLUSTER_DOMAIN,
        "evictionHard": EVICTION_HARD,
        **_cloud_instance(spec),
    }


def _cloud_instance(spec: NodeSpec) -> dict:
    """The settings only a cloud instance's kubelet gets (see NodeSpec), when it does."""
    settings: dict = {}
    if spec.provider_id:
        settings["providerID"] = spec.provider_id
    if spec.kube_reserved:
        settings["kubeReserved"] = dict(spec.kube_reserved)
    if spec.system_reserved:
        settings["systemReserved"] = dict(spec.system_reserved)
    if spec.max_pods is not None:
        settings["maxPods"] = spec.max_pods
    return settings


def kubelet_command(kubelet: Path, spec: NodeSpec, paths: NodePaths) -> list[str]:
    labels = {"kubernetes.io/hostname": spec.hostname, **spec.labels}
    return [
        str(kubelet),
        f"--config={paths.kubelet_config}",
        f"--kubeconfig={paths.kubeconfig}",
        f"--root-dir={paths.kubelet_root}",
        f"--hostname-override={spec.name}",
        "--node-ip=" + ",".join(spec.node_ips),
        "--node-labels=" + ",".join(f"{key}={value}" for key, value in labels.items()),
        # cAdvisor's stats of every container, every 10 s by default: read by nothing here
        # but eviction, and with a dozen kubelets on one host a tenth of a core (measured
        # with 6 idle nodes: kubelets and containerds 12 % of a core, 8 % at 60 s).
        "--housekeeping-interval=60s",
    ]


def kube_proxy_config(spec: NodeSpec, paths: NodePaths) -> dict:
    """kube-proxy in iptables mode, in the node's netns: pods reach Services (the apiserver's
    `kubernetes` Service above all) as on a real node. The conntrack settings are left as
    the kernel has them: kube-proxy would otherwise raise the host's nf_conntrack_max."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(paths.kube_proxy_kubeconfig)},
        "hostnameOverride": spec.name,
        "bindAddress": spec.ip,
        "healthzBindAddress": f"127.0.0.1:{KUBE_PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": f"127.0.0.1:{KUBE_PROXY_METRICS_PORT}",
        "mode": "iptables",
        "clusterCIDR": str(netsetup.CLUSTER_CIDR),
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


def kube_proxy_command(kube_proxy: Path, paths: NodePaths) -> list[str]:
    return [str(kube_proxy), f"--config={paths.kube_proxy_config}"]


def _taint(text: str) -> dict[str, str]:
    """"key[=value]:Effect" as a Taint object."""
    key_value, _, effect = text.rpartition(":")
    key, _, value = key_value.partition("=")
    taint = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return taint
