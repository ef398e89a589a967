"""Kubernetes quantities: exact parsing and the original's unit conversions."""

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edl.api.quantity import (
    QuantityError,
    cpu_milli,
    format_quantity,
    gpu_count,
    memory_mega,
    parse_quantity,
)

DECIMAL_SUFFIXES = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("500m", Fraction(1, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("1.", 1),
        ("+2", 2),
        ("1k", 1000),
        ("1M", 10**6),
        ("1G", 10**9),
        ("2T", 2 * 10**12),
        ("1P", 10**15),
        ("3E", 3 * 10**18),
        ("1Ki", 1024),
        ("100Mi", 100 * 2**20),
        ("1.5Gi", 3 * 2**29),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("1Ei", 2**60),
        ("1e3", 1000),
        ("1E3", 1000),
        ("25e-1", Fraction(5, 2)),
        ("1e+2", 100),
        ("100n", Fraction(1, 10**7)),
        ("5u", Fraction(5, 10**6)),
        (3, 3),
        (0.25, Fraction(1, 4)),
        (0.1, Fraction(1, 10)),
    ],
)
def test_parses_every_suffix_exactly(text: str | int | float, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["", "abc", "1KiB", "1.2.3", " 1", "1 ", "e3", "1e", "Mi", "1ki", "--1", "1m1"]
)
def test_rejects_non_quantities_naming_field_and_text(text: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse_quantity(text, "spec.trainer.resources.limits.cpu")
    assert caught.value.field == "spec.trainer.resources.limits.cpu"
    assert caught.value.text == text
    assert str(caught.value) == f"spec.trainer.resources.limits.cpu: invalid quantity {text!r}"


@pytest.mark.parametrize("value", [True, None, [1], float("nan"), float("inf")])
def test_rejects_non_quantity_types(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value, "x")  # type: ignore[arg-type]


def test_conversions_match_the_original() -> None:
    assert memory_mega("100Mi") == 105  # 104.8576 rounded up
    assert memory_mega("1G") == 1000
    assert memory_mega("1") == 1  # one byte still needs a mega
    assert cpu_milli("1k") == 1_000_000
    assert cpu_milli("250m") == 250
    assert cpu_milli("0.1") == 100
    assert cpu_milli("100u") == 1  # rounded up, like MilliValue
    assert gpu_count("2") == 2
    assert gpu_count(1) == 1


@given(st.integers(min_value=-(10**6), max_value=10**6), st.sampled_from(sorted(DECIMAL_SUFFIXES)))
def test_decimal_suffix_multiplies_by_power_of_ten(number: int, suffix: str) -> None:
    assert parse_quantity(f"{number}{suffix}") == number * Fraction(10) ** DECIMAL_SUFFIXES[suffix]


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(BINARY_SUFFIXES)))
def test_binary_suffix_multiplies_by_power_of_1024(number: int, suffix: str) -> None:
    assert parse_quantity(f"{number}{suffix}") == number * 1024 ** BINARY_SUFFIXES[suffix]


@given(
    st.decimals(
        min_value=-(10**9), max_value=10**9, places=6, allow_nan=False, allow_infinity=False
    )
)
def test_decimal_text_parses_exactly(number: Decimal) -> None:
    assert parse_quantity(str(number)) == Fraction(number)
    mantissa, exponent = f"{number:e}".split("e")
    assert parse_quantity(f"{mantissa}e{int(exponent)}") == Fraction(number)


@given(st.fractions(min_value=0, max_value=10**12, max_denominator=10**9))
def test_format_round_trips_when_exact_and_never_rounds_down(value: Fraction) -> None:
    back = parse_quantity(format_quantity(value))
    assert back >= value
    if (value * 10**9).denominator == 1:
        assert back == value


@given(st.integers(min_value=0, max_value=10**15))
def test_memory_mega_is_ceiling(number_of_bytes: int) -> None:
    mega = memory_mega(str(number_of_bytes))
    assert (mega - 1) * 10**6 < number_of_bytes <= mega * 10**6


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(["", "m", "k", "u"]))
def test_cpu_milli_is_ceiling(number: int, suffix: str) -> None:
    value = parse_quantity(f"{number}{suffix}")
    milli = cpu_milli(f"{number}{suffix}")
    assert milli - 1 < value * 1000 <= milli
