"""A real node's files and command lines, compared whole (localcluster/localcluster/node/config.py)."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from localcluster.certs import Pki
from localcluster.node import config, containerdconfig
from localcluster.node.config import Mirror, NodePaths, NodeSpec

SPEC = NodeSpec(name="ip-10-0-1-7.ec2.internal", index=3, gpus=2, gpu_resource="nvidia.com/gpu",
                hostname="ip-10-0-1-7", labels={"pool": "a"}, taints=("nvidia.com/gpu=present:NoSchedule",))
PATHS = NodePaths(root=Path("/run/dt/nodes/n3"), image_store=Path("/cache/node-images/n3"))
PKI = Pki(Path("/run/dt/pki"))


def test_a_node_has_the_addresses_and_names_of_its_index():
    assert (SPEC.ip, SPEC.pod_subnet, SPEC.netns, SPEC.host_veth, SPEC.cgroup) == (
        "10.233.0.13", "10.233.3.0/24", "dt-n3", "dtn3", "dt-n3")


def test_containerd_keeps_its_images_in_the_cache_and_the_rest_in_the_run_directory():
    assert tomllib.loads(containerdconfig.containerd_config(PATHS)) == {
        "version": 2,
        "root": "/cache/node-images/n3",
        "state": "/run/dt/nodes/n3/containerd/state",
        "grpc": {"address": "/run/dt/nodes/n3/containerd/containerd.sock"},
        "ttrpc": {"address": "/run/dt/nodes/n3/containerd/containerd.sock.ttrpc"},
        "plugins": {
            "io.containerd.internal.v1.opt": {"path": "/run/dt/nodes/n3/containerd/opt"},
            "io.containerd.grpc.v1.cri": {
                "sandbox_image": "registry.k8s.io/pause:3.10",
                "stream_server_address": "127.0.0.1",
                "stream_server_port": "0",
                "netns_mounts_under_state_dir": True,
                "restrict_oom_score_adj": True,
                "containerd": {
                    "snapshotter": "overlayfs",
                    "default_runtime_name": "runc",
                    "runtimes": {"runc": {
                        "runtime_type": "io.containerd.runc.v2",
                        "options": {"SystemdCgroup": False, "Root": "/run/dt/nodes/n3/runc"},
                    }},
                },
                "cni": {"bin_dir": "/usr/lib/cni", "conf_dir": "/run/dt/nodes/n3/cni/net.d", "max_conf_num": 2},
                "registry": {"config_path": "/run/dt/nodes/n3/registry-hosts"},
            },
        },
    }


def test_every_mirrored_registry_is_pulled_from_its_own_path_of_the_local_registry():
    hosts = containerdconfig.registry_hosts(Mirror("http://10.233.0.1:5000", ("docker.io", "nvcr.io")))
    assert {registry: tomllib.loads(text) for registry, text in hosts.items()} == {
        "docker.io": {
            "server": "https://docker.io",
            "host": {"http://10.233.0.1:5000/v2/docker.io": {"capabilities": ["pull", "resolve"],
                                                             "override_path": True}},
        },
        "nvcr.io": {
            "server": "https://nvcr.io",
            "host": {"http://10.233.0.1:5000/v2/nvcr.io": {"capabilities": ["pull", "resolve"],
                                                           "override_path": True}},
        },
    }


def test_pods_get_addresses_from_the_nodes_subnet_behind_its_bridge():
    assert config.cni_config(SPEC, PATHS) == {
        "cniVersion": "0.4.0",
        "name": "localcluster-dt-n3",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.233.3.0/24"}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": "/run/dt/nodes/n3/cni/ipam",
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def test_the_kubelet_authenticates_by_the_cluster_ca_and_authorizes_through_the_apiserver():
    assert config.kubelet_config(SPEC, PATHS, PKI) == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "10.233.0.13",
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "tlsCertFile": "/run/dt/pki/kubelet.crt",
        "tlsPrivateKeyFile": "/run/dt/pki/kubelet.key",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": "/run/dt/pki/ca.crt"},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": "/dt-n3/pods",
        "failCgroupV1": False,
        "failSwapOn": False,
        "protectKernelDefaults": False,
        "containerRuntimeEndpoint": "unix:///run/dt/nodes/n3/containerd/containerd.sock",
        "podLogsDir": "/run/dt/nodes/n3/pods",
        "serializeImagePulls": False,
        "registerNode": True,
        "registerWithTaints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        "resolvConf": "/etc/resolv.conf",
        "clusterDomain": "cluster.local",
        # Short of disk when the machine is, not at 15 % of a build machine's large disk.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2Gi", "imagefs.available": "2Gi",
                         "nodefs.inodesFree": "5%"},
    }


def test_the_kubelet_registers_the_node_by_name_with_its_own_hostname_label():
    assert config.kubelet_command(Path("/bin/kubelet"), SPEC, PATHS) == [
        "/bin/kubelet",
        "--config=/run/dt/nodes/n3/kubelet.yaml",
        "--kubeconfig=/run/dt/nodes/n3/kubelet.kubeconfig",
        "--root-dir=/run/dt/nodes/n3/kubelet",
        "--hostname-override=ip-10-0-1-7.ec2.internal",
        "--node-ip=10.233.0.13",
        "--node-labels=kubernetes.io/hostname=ip-10-0-1-7,pool=a",
        "--housekeeping-interval=60s",
    ]


def test_kube_proxy_leaves_the_hosts_conntrack_settings_alone():
    assert config.kube_proxy_config(SPEC, PATHS) == {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": "/run/dt/nodes/n3/kube-proxy.kubeconfig"},
        "hostnameOverride": "ip-10-0-1-7.ec2.internal",
        "bindAddress": "10.233.0.13",
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "mode": "iptables",
        "clusterCIDR": "10.233.0.0/16",
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }
    assert config.kube_proxy_command(Path("/bin/kube-proxy"), PATHS) == [
        "/bin/kube-proxy", "--config=/run/dt/nodes/n3/kube-proxy.yaml"]
    assert containerdconfig.containerd_command(Path("/usr/bin/containerd"), PATHS) == [
        "/usr/bin/containerd", "--config=/run/dt/nodes/n3/containerd.toml"]


def test_the_image_cache_s_containerd_holds_images_only():
    root, state = Path("/cache/node-images/seed"), Path("/run/dt/seed-containerd")
    assert tomllib.loads(containerdconfig.seed_containerd_config(root, state, state / "containerd.sock")) == {
        "version": 2,
        "root": "/cache/node-images/seed",
        "state": "/run/dt/seed-containerd/state",
        "disabled_plugins": ["io.containerd.grpc.v1.cri"],
        "grpc": {"address": "/run/dt/seed-containerd/containerd.sock"},
        "ttrpc": {"address": "/run/dt/seed-containerd/containerd.sock.ttrpc"},
        "plugins": {"io.containerd.internal.v1.opt": {"path": "/run/dt/seed-containerd/opt"}},
    }


def test_a_cloud_instance_s_kubelet_sets_its_provider_id_reservations_and_pod_limit():
    instance = dataclasses.replace(SPEC, provider_id="localcluster://gpu-x", kube_reserved={"cpu": "100m"},
                                   system_reserved={"memory": "1Gi"}, max_pods=110)
    kubelet = config.kubelet_config(instance, PATHS, PKI)
    assert {key: value for key, value in kubelet.items() if key not in config.kubelet_config(SPEC, PATHS, PKI)} == {
        "providerID": "localcluster://gpu-x", "kubeReserved": {"cpu": "100m"},
        "systemReserved": {"memory": "1Gi"}, "maxPods": 110}


def test_an_ipv6_first_node_gives_its_pods_both_families_ipv6_first_and_is_reached_on_both():
    six = dataclasses.replace(SPEC, ipv6_first=True)
    assert (six.ip_v6, six.node_ips) == ("fd74:6400::d", ["fd74:6400::d", "10.233.0.13"])
    ipam = config.cni_config(six, PATHS)["plugins"][0]["ipam"]
    assert ipam["ranges"] == [[{"subnet": "fd74:6400:0:3::/64"}], [{"subnet": "10.233.3.0/24"}]]
    assert ipam["routes"] == [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
    # The kubelet reports the pod address of its first node IP's family as status.podIP.
    assert "--node-ip=fd74:6400::d,10.233.0.13" in config.kubelet_command(Path("/bin/kubelet"), six, PATHS)
    assert config.kubelet_config(six, PATHS, PKI)["address"] == "::"
    assert config.kubelet_config(SPEC, PATHS, PKI)["address"] == "10.233.0.13"


def test_an_ipv6_only_node_gives_its_pods_ipv6_alone_and_an_ipv4_interface_for_egress():
    """As EKS's IPv6 clusters: Kubernetes sees only eth0's IPv6 address; eth1 reaches IPv4
    (the apiserver's Service) masqueraded to the node."""
    six = dataclasses.replace(SPEC, ipv6_only=True)
    assert six.node_ips == ["fd74:6400::d", "10.233.0.13"] and config.kubelet_config(six, PATHS, PKI)["address"] == "::"
    ipam = config.cni_config(six, PATHS)["plugins"][0]["ipam"]
    assert (ipam["ranges"], ipam["routes"]) == ([[{"subnet": "fd74:6400:0:3::/64"}]], [{"dst": "::/0"}])
    assert config.egress_cni_config(six, PATHS) == {
        "cniVersion": "0.4.0",
        "name": "localcluster-dt-n3-egress",
        "plugins": [{"type": "bridge", "bridge": "cni1", "isGateway": True, "ipMasq": True,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": "169.254.172.0/22"}]],
                              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(PATHS.cni_ipam_dir)}}],
    }
