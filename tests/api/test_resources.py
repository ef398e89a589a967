"""Resource lists: adding, effective requests, reading CPU/memory/GPU."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edl.api.quantity import QuantityError, parse_quantity
from edl.api.resources import (
    GPU,
    GPU_LEGACY,
    add_resource_list,
    effective_requests,
    gpu_of,
    list_cpu_milli,
    list_memory_mega,
    parse_resource_list,
)


def test_add_keeps_every_name_and_sums_shared_ones() -> None:
    a: dict = {"cpu": "500m", "memory": "1Gi"}
    result = add_resource_list(a, {"cpu": "1.5", GPU: 2})
    assert result is a
    assert a == {"cpu": Fraction(2), "memory": "1Gi", GPU: Fraction(2)}


def test_add_none_or_empty_changes_nothing() -> None:
    a: dict = {"cpu": "1"}
    add_resource_list(a, None)
    add_resource_list(a, {})
    assert a == {"cpu": "1"}


def test_add_names_the_bad_resource() -> None:
    with pytest.raises(QuantityError, match="memory: invalid quantity 'lots'"):
        add_resource_list({}, {"memory": "lots"})


@given(
    st.lists(
        st.dictionaries(st.sampled_from(["cpu", "memory", GPU]), st.integers(0, 10**6)), max_size=6
    )
)
def test_adding_lists_sums_per_name(lists: list[dict[str, int]]) -> None:
    total: dict = {}
    for item in lists:
        add_resource_list(total, {k: f"{v}m" for k, v in item.items()})
    names = {k for item in lists for k in item}
    assert set(total) == names
    for name in names:
        assert parse_quantity(total[name]) == Fraction(sum(i.get(name, 0) for i in lists), 1000)


def test_effective_requests_default_to_limits() -> None:
    requirements = {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "500m"}}
    assert effective_requests(requirements) == {"cpu": Fraction(1, 2), "memory": Fraction(2**30)}
    assert effective_requests(None) == {}


def test_readers() -> None:
    resources = {"cpu": "1500m", "memory": "100Mi", GPU_LEGACY: "2"}
    assert list_cpu_milli(resources) == 1500
    assert list_memory_mega(resources) == 105
    assert gpu_of(resources) == 2
    assert gpu_of({GPU: 1, GPU_LEGACY: 4}) == 1
    assert (list_cpu_milli(None), list_memory_mega({}), gpu_of(None)) == (0, 0, 0)
    with pytest.raises(QuantityError, match=r"limits\.cpu"):
        parse_resource_list({"cpu": "x"}, "limits")
