"""The sockets the nodes leave on the host (a killed shim's, the kubelets' device plugins'
socket): removed at `down` when nobody listens on them, kept while someone does."""

import socket

from localcluster.node import hostchanges


def test_only_sockets_nobody_listens_on_are_removed(tmp_path):
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(tmp_path / "live.sock"))
    live.listen()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:  # its file outlives it, as a killed kubelet's
        dead.bind(str(tmp_path / "kubelet.sock"))
    (tmp_path / "notes").write_text("not a socket")
    try:
        hostchanges._remove_dead_sockets(tmp_path)
        assert sorted(entry.name for entry in tmp_path.iterdir()) == ["live.sock", "notes"]
    finally:
        live.close()
