"""What `localcluster down` forgets of a run: the API's objects (etcd's data) go unless
`--keep-state`, so the next `up` brings back none of the last run's pods; the PKI,
kubeconfigs and logs stay. The real removal, on a run directory of the test's own."""

import pytest

from localcluster.__main__ import _parser
from localcluster.leftovers import forget_api_state
from localcluster.layout import RunLayout

# A stopped run's files, as `up` and the components leave them.
RUN_FILES = ("etcd/member/snap/db", "etcd/member/wal/0000000000000000-0000000000000000.wal",
             "pki/ca.crt", "pki/kube-scheduler.kubeconfig", "kubeconfig", "logs/etcd.log", "registry.json")


def files_under(root):
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


def test_down_forgets_etcd_data_and_keeps_the_rest_of_the_run_directory(tmp_path):
    layout = RunLayout(tmp_path / "run")
    for name in RUN_FILES:
        (layout.root / name).parent.mkdir(parents=True, exist_ok=True)
        (layout.root / name).write_text("x")

    forget_api_state(layout)

    assert files_under(layout.root) == ["kubeconfig", "logs/etcd.log", "pki/ca.crt", "pki/kube-scheduler.kubeconfig",
                                        "registry.json"]
    assert not layout.etcd_data.exists()


def test_forgetting_twice_or_a_run_that_never_started_is_harmless(tmp_path):
    layout = RunLayout(tmp_path / "never-started")
    forget_api_state(layout)
    forget_api_state(layout)
    assert not layout.root.exists()


@pytest.mark.parametrize(("argv", "keep_state", "purge"), [
    (["down"], False, False), (["down", "--keep-state"], True, False), (["down", "--purge"], False, True),
])
def test_down_forgets_state_unless_asked_to_keep_it(argv, keep_state, purge):
    args = _parser().parse_args(argv)
    assert (args.keep_state, args.purge) == (keep_state, purge)


def test_keeping_state_and_purging_it_together_is_refused(capsys):
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["down", "--keep-state", "--purge"])
    assert exited.value.code == 2
    assert "--purge: not allowed with argument --keep-state" in capsys.readouterr().err
