"""Which Kubernetes release the local cluster builds and runs (localcluster/localcluster/versions.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from localcluster import versions
from localcluster.layout import CONTROLPLANE_SRC
from localcluster.versions import KubernetesVersion

V1_34, V1_35, V1_36, V1_37 = (KubernetesVersion(1, minor) for minor in (34, 35, 36, 37))


def test_every_release_with_a_wrapper_module_is_supported_oldest_first():
    assert versions.supported() == (V1_34, V1_35, V1_36, V1_37)


def test_each_wrapper_module_pins_its_own_release_and_that_release_s_staging_modules():
    for version in versions.supported():
        go_mod = (versions.module_dir(version) / "go.mod").read_text()
        pinned = versions.pinned(version)
        assert re.fullmatch(rf"v{version}\.\d+", pinned)
        staging = re.findall(r"^\t(k8s\.io/\S+) => \1 (v\S+)$", go_mod, re.MULTILINE)
        assert len(staging) > 25
        assert {replacement for _, replacement in staging} == {"v0" + pinned.removeprefix("v1")}
        assert (versions.module_dir(version) / "main.go").resolve() == CONTROLPLANE_SRC / "main.go"


def test_a_release_is_chosen_by_major_and_minor():
    assert [versions.parse(text) for text in ("1.36", "v1.36", " 1.34 ")] == [V1_36, V1_36, V1_34]
    assert str(V1_37) == "1.37"


@pytest.mark.parametrize("text", ["1.33", "1.36.3", "136", "", "latest"])
def test_a_release_without_a_wrapper_module_is_refused_naming_the_valid_ones(text):
    with pytest.raises(ValueError, match=re.escape("use MAJOR.MINOR, e.g. 1.36, one of 1.34, 1.35, 1.36, 1.37")):
        versions.parse(text)


def test_the_environment_chooses_the_release_and_1_34_is_the_default():
    assert versions.selected({}) == V1_34
    assert versions.selected({versions.ENV: ""}) == V1_34
    assert versions.selected({versions.ENV: "1.37"}) == V1_37


def test_build_sh_builds_the_same_default_release():
    build = (CONTROLPLANE_SRC / "build.sh").read_text()
    assert f'MINOR="${{1:-${{{versions.ENV}:-{versions.DEFAULT}}}}}"' in build


def test_a_run_directory_remembers_the_release_its_cluster_was_started_with(tmp_path: Path):
    version_file = versions.version_file(tmp_path)
    assert versions.recorded(version_file) is None
    versions.record(version_file, V1_36)
    assert versions.recorded(version_file) == V1_36
