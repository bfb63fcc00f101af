"""Command lines of the control-plane components.

Pure builders: given the run layout, PKI and binaries they return argv lists,
so the exact flags are in one place, restarts reuse them verbatim, and they
can be checked without starting anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localcluster import netsetup
from localcluster.certs import APISERVER_KUBELET_CLIENT, FRONT_PROXY_CLIENT, Pki
from localcluster.layout import RunLayout
from localcluster.versions import KubernetesVersion

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
REGISTRY = "registry"
PULL_PROXY = "registry-pull-proxy"
# Order of start-up; `down` stops them in reverse.
COMPONENTS = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER, REGISTRY, PULL_PROXY)
# Controllers run beside them on demand (`up --kueue`, `up --karpenter`); `down` stops them first.
KUEUE = "kueue"
KARPENTER = "karpenter"

# Not etcd's default ports, so a system etcd cannot get in the way.
ETCD_CLIENT_PORT = 12379
ETCD_PEER_PORT = 12380
APISERVER_PORT = 6443
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Gang scheduling (KEP-4671): the PodGroup of scheduling.k8s.io/v1beta1, beta from 1.37 and
# off by default there (k8s.io/kubernetes v1.37.2, pkg/features/kube_features.go). One gate,
# GenericWorkload, on each component that serves it: the apiserver (the PodGroup API, a pod's
# spec.schedulingGroup, the PodGroupProtection admission plugin's finalizer), the scheduler
# (the GangScheduling plugin and the pod group scheduling cycle: cmd/kube-scheduler's
# default_plugins.go) and the controller-manager (the podgroup-protection controller that
# lifts that finalizer once no pod uses the group); the kubelet reads none of it. The beta
# version is served only when asked for (--runtime-config). No Workload object is needed: a
# PodGroup's workloadRef is optional. Releases before 1.37 get none of these flags.
GANG_SCHEDULING_FROM = KubernetesVersion(1, 37)
GANG_SCHEDULING_GATE = "GenericWorkload=true"
GANG_SCHEDULING_API = "scheduling.k8s.io/v1beta1=true"


@dataclass(frozen=True)
class Binaries:
    """Where the executables are: the built Kubernetes bin dir (etcd too) and the registry."""

    kubernetes_bin: Path
    registry: Path

    def kubernetes(self, name: str) -> Path:
        return self.kubernetes_bin / name


def etcd_url() -> str:
    return f"http://127.0.0.1:{ETCD_CLIENT_PORT}"


def gang_scheduling(version: KubernetesVersion) -> bool:
    """Whether the cluster's release serves gang scheduling (its flags below turn it on)."""
    return version >= GANG_SCHEDULING_FROM


def commands(layout: RunLayout, pki: Pki, binaries: Binaries, version: KubernetesVersion) -> dict[str, list[str]]:
    """The Kubernetes components' command lines (controlplane.commands adds the registry's and its pull proxy's)."""
    return {
        ETCD: etcd_command(layout, binaries),
        APISERVER: apiserver_command(pki, binaries, version),
        CONTROLLER_MANAGER: controller_manager_command(layout, pki, binaries, version),
        SCHEDULER: scheduler_command(layout, binaries, version),
    }


def etcd_command(layout: RunLayout, binaries: Binaries) -> list[str]:
    peer_url = f"http://127.0.0.1:{ETCD_PEER_PORT}"
    return [
        str(binaries.kubernetes(ETCD)),
        "--name=localcluster",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={etcd_url()}",
        f"--advertise-client-urls={etcd_url()}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=localcluster={peer_url}",
        "--initial-cluster-state=new",
        "--logger=zap",
        "--log-level=warn",
    ]


def apiserver_command(pki: Pki, binaries: Binaries, version: KubernetesVersion) -> list[str]:
    kubelet_client = APISERVER_KUBELET_CLIENT.name
    gang = gang_scheduling(version)
    return [
        str(binaries.kubernetes(APISERVER)),
        f"--etcd-servers={etcd_url()}",
        "--bind-address=0.0.0.0",
        f"--advertise-address={netsetup.HOST_IP}",
        f"--secure-port={APISERVER_PORT}",
        f"--tls-cert-file={pki.cert('apiserver')}",
        f"--tls-private-key-file={pki.key('apiserver')}",
        f"--client-ca-file={pki.ca_cert}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        f"--service-cluster-ip-range={netsetup.SERVICE_CIDR}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.sa_public_key}",
        f"--service-account-signing-key-file={pki.sa_private_key}",
        f"--kubelet-client-certificate={pki.cert(kubelet_client)}",
        f"--kubelet-client-key={pki.key(kubelet_client)}",
        f"--kubelet-certificate-authority={pki.ca_cert}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        # The aggregation layer, for aggregated APIs such as Kueue's visibility API: the
        # apiserver proxies their requests as FRONT_PROXY_CLIENT, naming the user in
        # headers, and dials the service's endpoint itself (no kube-proxy on the host).
        f"--requestheader-client-ca-file={pki.ca_cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT.user}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.cert(FRONT_PROXY_CLIENT.name)}",
        f"--proxy-client-key-file={pki.key(FRONT_PROXY_CLIENT.name)}",
        "--enable-aggregator-routing=true",
        # MutatingAdmissionPolicy (beta in 1.34 and 1.35, off by default; GA from 1.36, where
        # the gate and v1beta1 are still accepted, through 1.37: k8s.io/apiserver's
        # kube_features.go, k8s.io/api's admissionregistration/v1beta1): the OpenShift-like
        # namespaces' admission (openshift.py) assigns their pods UIDs with it.
        "--feature-gates=MutatingAdmissionPolicy=true" + (f",{GANG_SCHEDULING_GATE}" if gang else ""),
        "--runtime-config=admissionregistration.k8s.io/v1beta1=true" + (f",{GANG_SCHEDULING_API}" if gang else ""),
        "--profiling=false",
    ]


def controller_manager_command(layout: RunLayout, pki: Pki, binaries: Binaries,
                               version: KubernetesVersion) -> list[str]:
    kubeconfig = layout.component_kubeconfig(CONTROLLER_MANAGER)
    return [
        str(binaries.kubernetes(CONTROLLER_MANAGER)),
        f"--kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        "--controllers=*",
        f"--root-ca-file={pki.ca_cert}",
        f"--service-account-private-key-file={pki.sa_private_key}",
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={pki.ca_cert}",
        f"--cluster-signing-key-file={pki.ca_key}",
        f"--service-cluster-ip-range={netsetup.SERVICE_CIDR}",
        # A claim made just before its pod binds in a second, not at the next 15 s resync
        # (a pod on an unbound claim is unschedulable meanwhile).
        "--pvclaimbinder-sync-period=1s",
        # A new node is schedulable once the node lifecycle controller has seen it Ready and
        # lifted the not-ready taint it may have added in the kubelet's first second: at its
        # next pass, up to 5 s later by default. Tests start some 150 nodes.
        "--node-monitor-period=1s",
        "--profiling=false",
        *_gang_scheduling_gate(version),
    ]


def scheduler_command(layout: RunLayout, binaries: Binaries, version: KubernetesVersion) -> list[str]:
    return [
        str(binaries.kubernetes(SCHEDULER)),
        f"--kubeconfig={layout.component_kubeconfig(SCHEDULER)}",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        *_gang_scheduling_gate(version),
    ]


def _gang_scheduling_gate(version: KubernetesVersion) -> list[str]:
    return [f"--feature-gates={GANG_SCHEDULING_GATE}"] if gang_scheduling(version) else []
