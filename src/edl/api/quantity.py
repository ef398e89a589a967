"""Kubernetes resource quantities, parsed exactly.

Why exact: the autoscaler compares sums of requests against cluster totals;
floats would make `0.1 + 0.2` CPUs differ from `300m`. Quantities are kept as
`fractions.Fraction` and converted to the integer units the original used:
CPU in milli, memory in "mega" (10^6 bytes) and GPUs as a count, each rounded
up like `resource.Quantity.ScaledValue` does.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = [
    "Quantity",
    "QuantityError",
    "cpu_milli",
    "format_quantity",
    "gpu_count",
    "memory_mega",
    "parse_quantity",
]

Quantity = Fraction
QuantityLike = str | int | float | Fraction

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# <signedNumber><suffix>, with suffix one of: binary SI, decimal SI, or e/E<signedNumber>.
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)"
    r"|[eE](?P<exponent>[+-]?[0-9]+)"
    r"|(?P<decimal>[numkMGTPE]?))$"
)


class QuantityError(ValueError):
    """A text that is not a Kubernetes quantity; names the field it came from."""

    def __init__(self, field: str, text: object) -> None:
        self.field = field
        self.text = text
        super().__init__(
            f"{field}: invalid quantity {text!r}" if field else f"invalid quantity {text!r}"
        )


def parse_quantity(text: QuantityLike, field: str = "") -> Fraction:
    """Parse a quantity (`"500m"`, `"1.5Gi"`, `"1e3"`, `2`, `0.5`) into an exact Fraction.

    Raises QuantityError naming `field` and the text when it is not a quantity.
    """
    if isinstance(text, bool):
        raise QuantityError(field, text)
    if isinstance(text, Fraction):
        return text
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(field, text)
        text = repr(text)  # shortest text that reads back as this float, as YAML wrote it
    if not isinstance(text, str):
        raise QuantityError(field, text)
    match = _QUANTITY.match(text.strip())
    if match is None or text.strip() != text:
        raise QuantityError(field, text)
    number = Fraction(match["number"])
    if match["binary"]:
        return number * 1024 ** _BINARY[match["binary"]]
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > 1000:  # absurd exponents would make enormous integers
            raise QuantityError(field, text)
        return number * Fraction(10) ** exponent
    return number * Fraction(10) ** _DECIMAL[match["decimal"] or ""]


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def cpu_milli(quantity: QuantityLike, field: str = "") -> int:
    """CPU in milli-cores, rounded up (`"1k"` -> 1_000_000, `"0.1"` -> 100)."""
    return _ceil(parse_quantity(quantity, field) * 1000)


def memory_mega(quantity: QuantityLike, field: str = "") -> int:
    """Memory in units of 10^6 bytes, rounded up (`"100Mi"` -> 105)."""
    return _ceil(parse_quantity(quantity, field) / 1_000_000)


def gpu_count(quantity: QuantityLike, field: str = "") -> int:
    """GPUs as a whole count, rounded up like Kubernetes' `Quantity.Value()`."""
    return _ceil(parse_quantity(quantity, field))


def format_quantity(value: Fraction | int) -> str:
    """Render an exact value as a quantity text that parses back to the same value.

    Integers print plainly; whole milli values use `m`; anything else is written
    as a decimal with an exponent when it terminates, else as milli rounded up.
    """
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    nano = value * 1_000_000_000
    if nano.denominator == 1:
        return f"{nano.numerator}n"
    return f"{_ceil(nano)}n"
