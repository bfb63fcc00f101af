"""`$(VAR)` expansion: the cases of the kubelet's own expansion tests."""

import pytest

from localcluster.agent.expansion import expand, mapping_for

MAPPING = mapping_for({"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_EMPTY": "", "BIG_MONEY": "$"})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(VAR_A)", "A"),
        ("___$(VAR_B)___", "___B___"),
        ("$(VAR_A)-1", "A-1"),
        ("$(VAR_A)_$(VAR_B)", "A_B"),
        ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
        ("$$(VAR_A)$$(VAR_B)", "$(VAR_A)$(VAR_B)"),
        ("f000-$$VAR_A", "f000-$VAR_A"),
        ("foo\\$(VAR_C)bar", "foo\\Cbar"),
        ("$(VAR_EMPTY)", ""),
        ("$(VAR_DNE)", "$(VAR_DNE)"),
        ("$(VAR_A", "$(VAR_A"),
        ("$VAR_A", "$VAR_A"),
        ("${VAR_A}", "${VAR_A}"),
        ("$$", "$"),
        ("$", "$"),
        ("$()", "$()"),
        ("$(VAR_A)$", "A$"),
        ("$(VAR_A)$(", "A$("),
        ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
        ("$$$$$$$(BIG_MONEY)", "$$$$"),
        ("plain text", "plain text"),
        ("", ""),
    ],
)
def test_expand_matches_kubelet(text, expected):
    assert expand(text, MAPPING) == expected


def test_earlier_contexts_win():
    mapping = mapping_for({"X": "first"}, {"X": "second", "Y": "only"})
    assert expand("$(X) $(Y)", mapping) == "first only"
