"""A local kubelet that exits having lost a start-up race is started again, not the
node failed: what it logs as it exits says which race (``realnode.START_RACES_LOST``)."""

import pytest

from localcluster.node.realnode import lost_a_start_race

# The last lines of kubelets that exited so, as a test's node pool started.
CADVISOR_PANIC = """\
panic: runtime error: index out of range [0] with length 0 [recovered, repanicked]

goroutine 352 [running]:
k8s.io/apimachinery/pkg/util/runtime.handleCrash({0x772a920, 0x1d5a47f0c070}, {0x6e82680, 0x1d5a48b4ba28}, {0x0, 0x0, 0x1d5a486292f8?})
	k8s.io/apimachinery@v0.34.10/pkg/util/runtime/runtime.go:114 +0x1a9
panic({0x6e82680?, 0x1d5a48b4ba28?})
	runtime/panic.go:860 +0x13a
github.com/google/cadvisor/manager.(*manager).GetFsInfo(0x1d5a48170008, {0x0, 0x0})
	github.com/google/cadvisor@v0.52.1/manager/manager.go:793 +0x5ea
k8s.io/kubernetes/pkg/kubelet/images.(*realImageGCManager).GarbageCollect(0x1d5a482b6790, {0x7729ad0?, 0xaf654c0?}, {0x0?, 0x0?, 0xaf3fc60?})
"""
SOCKET_RACE = ('E1130 04:12:01.123456 1234 server.go:310] "Failed to listen to socket while starting device plugin '
               'registry" err="listen unix /var/lib/kubelet/device-plugins/kubelet.sock: bind: address already in use"')
CONFIG_ERROR = 'E1130 04:12:01.123456 1234 run.go:72] "command failed" err="failed to parse kubelet flag: unknown flag"'


@pytest.mark.parametrize(("tail", "lost"), [(CADVISOR_PANIC, True), (SOCKET_RACE, True), (CONFIG_ERROR, False), ("", False)])
def test_a_kubelet_that_lost_a_start_up_race_is_told_from_one_that_failed(tail, lost):
    assert lost_a_start_race(tail) is lost
