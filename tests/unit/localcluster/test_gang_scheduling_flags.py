"""The control plane's flags for gang scheduling: on a release that serves the PodGroup
(1.37), the GenericWorkload gate on the apiserver, scheduler and controller-manager and its
API version asked for; on 1.34, the release CI runs, the command lines as they were."""

from pathlib import Path

from localcluster import components
from localcluster.certs import Pki
from localcluster.layout import RunLayout
from localcluster.versions import KubernetesVersion

LAYOUT = RunLayout(Path("/run/lc"))
PKI = Pki(Path("/run/lc/pki"))
BINARIES = components.Binaries(Path("/bin/k8s"), Path("/bin/registry"))


def commands(minor: int) -> dict[str, list[str]]:
    return components.commands(LAYOUT, PKI, BINARIES, KubernetesVersion(1, minor))


def test_1_34_s_command_lines_name_no_gang_scheduling():
    for argv in commands(34).values():
        assert not [flag for flag in argv if "GenericWorkload" in flag or "scheduling.k8s.io" in flag], argv


def test_1_37_turns_gang_scheduling_on_where_each_component_serves_it():
    old, new = commands(34), commands(37)
    added = {name: [flag for flag in new[name] if flag not in old[name]] for name in new}
    removed = {name: [flag for flag in old[name] if flag not in new[name]] for name in old}
    assert added == {
        components.ETCD: [],
        components.APISERVER: ["--feature-gates=MutatingAdmissionPolicy=true,GenericWorkload=true",
                               "--runtime-config=admissionregistration.k8s.io/v1beta1=true,"
                               "scheduling.k8s.io/v1beta1=true"],
        components.CONTROLLER_MANAGER: ["--feature-gates=GenericWorkload=true"],
        components.SCHEDULER: ["--feature-gates=GenericWorkload=true"],
    }
    assert removed == {components.ETCD: [], components.CONTROLLER_MANAGER: [], components.SCHEDULER: [],
                       components.APISERVER: ["--feature-gates=MutatingAdmissionPolicy=true",
                                              "--runtime-config=admissionregistration.k8s.io/v1beta1=true"]}


def test_only_releases_from_1_37_serve_gang_scheduling():
    assert [minor for minor in (34, 35, 36, 37) if components.gang_scheduling(KubernetesVersion(1, minor))] == [37]
