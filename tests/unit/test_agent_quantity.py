"""Resource quantities as exact fractions."""

from fractions import Fraction

import pytest

from localcluster.agent.quantity import divide_round_up, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1), ("500m", Fraction(1, 2)), ("2Gi", 2 * 2**30), ("1.5", Fraction(3, 2)), ("1e3", 1000), ("4k", 4000)],
)
def test_parse(text, value):
    assert parse_quantity(text) == value


def test_bad_quantity_names_the_format():
    with pytest.raises(ValueError, match="500m, 2Gi"):
        parse_quantity("lots")


def test_divide_rounds_up():
    assert divide_round_up(parse_quantity("1001m"), parse_quantity("1")) == 2
