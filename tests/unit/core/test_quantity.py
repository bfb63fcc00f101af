"""Resource quantities: parsed into whole units, formatted back exactly and briefly."""

import pytest
from hypothesis import given, strategies as st

from distributetrain.core import quantity


@pytest.mark.parametrize("text,millis", [("4", 4000), ("2.5", 2500), ("500m", 500), ("1", 1000), ("0.001", 1)])
def test_cpu(text, millis):
    assert quantity.cpu_millis(text) == millis


@pytest.mark.parametrize("text", ["0", "-1", "0.0001", "four", "1x", "", "4 cores"])
def test_bad_cpu(text):
    with pytest.raises(ValueError, match="like 4, 2.5 or 500m"):
        quantity.cpu_millis(text)


@pytest.mark.parametrize("text,size", [("16Gi", 16 * 2**30), ("512Mi", 512 * 2**20), ("20G", 20 * 10**9),
                                       ("1.5Gi", 1536 * 2**20), ("64Mi", 64 * 2**20)])
def test_memory(text, size):
    assert quantity.memory_bytes(text) == size


@pytest.mark.parametrize("text", ["16", "100m", "1.5", "0", "x", "63Mi", "16GB", "-8Gi"])
def test_bad_memory(text):
    with pytest.raises(ValueError, match="like 16Gi or 512Mi"):
        quantity.memory_bytes(text)


@pytest.mark.parametrize("size,text", [(8 * 2**30, "8Gi"), (16 * 10**9, "16G"), (1536 * 2**20, "1536Mi"),
                                       (3 * 2**30 + 1, "3221225473"), (2**40, "1Ti")])
def test_memory_is_formatted_in_its_shortest_exact_form(size, text):
    assert quantity.format_memory(size) == text


@given(st.integers(1, 10**9))
def test_cpu_round_trips(millis):
    assert quantity.cpu_millis(quantity.format_cpu(millis)) == millis


@given(st.integers(quantity.MIN_MEMORY_BYTES, 2**50))
def test_memory_round_trips(size):
    assert quantity.memory_bytes(quantity.format_memory(size)) == size
