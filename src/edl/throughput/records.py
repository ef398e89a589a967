"""Numbers read from other processes' records, checked before any figure is made (pure).

The shards' noise-scale records, the master's progress and a collective job's metrics
are JSON written by other processes (a pserver, the master, the user's script through
its agent). A value that is not a number (a string, a boolean — ``True`` is an int to
Python), not finite, or beyond any plausible size (a batch of 1e308 samples) would
otherwise turn into an infinite φ or a nonsense point of a scaling curve. Each field
has a range; a value outside it is dropped, and `DroppedValues` counts the drops and
warns with the count, so a publisher that writes garbage is seen, not just ignored.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DROPPED", "DroppedValues", "Field", "clean", "finite"]

log = logging.getLogger(__name__)

MAX_BATCH = 1e9  # samples per update: far beyond any real job's
MAX_COUNT = 1e15  # samples, updates, tasks
MAX_NORM = 1e100  # a gradient's squared norm or variance estimate


@dataclass(frozen=True)
class Field:
    """A numeric field's accepted range (``low`` excluded when ``open_low``)."""

    low: float
    high: float
    open_low: bool = False
    integer: bool = False

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.integer and not float(value).is_integer():
            return False
        if not math.isfinite(value) or value > self.high:
            return False
        return value > self.low if self.open_low else value >= self.low

    def read(self, value: Any) -> float | None:
        """The value as a float if it is accepted, else None."""
        return float(value) if self.accepts(value) else None


POSITIVE_BATCH = Field(0.0, MAX_BATCH, open_low=True)
COUNT = Field(0.0, MAX_COUNT, integer=True)
NORM = Field(-MAX_NORM, MAX_NORM)
RATE = Field(0.0, MAX_COUNT)
POSITIVE = Field(0.0, MAX_COUNT, open_low=True)


class DroppedValues:
    """Counts values dropped from records; warns at the first drop of each field of each
    kind of record, and at every 100th drop (a publisher writing garbage once a second
    would otherwise fill the log)."""

    def __init__(self) -> None:
        self.count = 0
        self._seen: set[tuple[str, str]] = set()

    def drop(self, source: str, name: str, value: Any) -> None:
        self.count += 1
        first = (source, name) not in self._seen
        self._seen.add((source, name))
        if first or self.count % 100 == 0:
            log.warning(
                "%s: %s=%.60r dropped (not a finite number in its range); %d value(s) "
                "dropped from other processes' records so far", source, name, value, self.count,
            )


DROPPED = DroppedValues()  # this process's count


def clean(
    record: Mapping[str, Any], fields: Mapping[str, Field], source: str,
    dropped: DroppedValues = DROPPED,
) -> dict[str, float]:
    """The record's fields that are usable numbers; each other present value counted.

    Absent and ``null`` values are not drops (a record need not carry every figure)."""
    out: dict[str, float] = {}
    for name, field in fields.items():
        value = record.get(name)
        if value is None:
            continue
        if field.accepts(value):
            out[name] = float(value)
        else:
            dropped.drop(source, name, value)
    return out


def finite(value: float, source: str, name: str, dropped: DroppedValues = DROPPED) -> bool:
    """A figure computed from accepted inputs is still finite (else counted, not used)."""
    if math.isfinite(value):
        return True
    dropped.drop(source, name, value)
    return False
