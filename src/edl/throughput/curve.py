"""Scaling curves: samples/s of a job as a function of its contributing trainers.

Two families, both plain frozen data (they cross process boundaries as JSON):

* `UslCurve` — Gunther's Universal Scalability Law, X(n) = r·n / (1 + σ(n−1) + κ·n(n−1)):
  ``r`` samples/s of one trainer, ``σ`` the serial (contention) fraction as in Amdahl's
  law, ``κ`` a communication (crosstalk) term that makes throughput peak and fall.
  Data-parallel training with a parameter server fits it well: the pserver is the
  shared resource (σ), all-to-all parameter traffic grows with n (κ).
* `PointsCurve` — measured points, linear between them, through (0, 0), flat
  beyond the last point (it does not extrapolate a gain nobody measured).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Curve", "PointsCurve", "UslCurve", "scaled"]


class Curve(Protocol):
    """Samples/s with ``n`` contributing trainers (0 for n <= 0)."""

    def rate(self, n: int) -> float: ...

    def describe(self) -> str: ...


@dataclass(frozen=True, slots=True)
class UslCurve:
    per_trainer: float
    serial: float = 0.0
    comm: float = 0.0

    def __post_init__(self) -> None:
        bad = [
            name
            for name, value, low in (
                ("per_trainer", self.per_trainer, 0.0),
                ("serial", self.serial, 0.0),
                ("comm", self.comm, 0.0),
            )
            if not (math.isfinite(value) and value >= low)
        ]
        if bad:
            raise ValueError(f"UslCurve: {', '.join(bad)} must be finite and >= 0")

    def rate(self, n: int) -> float:
        if n <= 0:
            return 0.0
        return self.per_trainer * n / (1.0 + self.serial * (n - 1) + self.comm * n * (n - 1))

    def peak(self) -> float:
        """Trainer count of the highest throughput (inf when it keeps rising)."""
        if self.comm <= 0:
            return math.inf
        return math.sqrt((1.0 - self.serial) / self.comm) if self.serial < 1 else 1.0

    def describe(self) -> str:
        return f"usl(r={self.per_trainer:.3g}/s, serial={self.serial:.3g}, comm={self.comm:.3g})"


@dataclass(frozen=True, slots=True)
class PointsCurve:
    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        counts = [n for n, _ in self.points]
        if not self.points:
            raise ValueError("PointsCurve: needs at least one point")
        if counts != sorted(set(counts)) or counts[0] < 1:
            raise ValueError("PointsCurve: trainer counts must be >= 1 and strictly increase")
        if any(not (math.isfinite(x) and x >= 0) for _, x in self.points):
            raise ValueError("PointsCurve: samples/s must be finite and >= 0")

    def rate(self, n: int) -> float:
        if n <= 0:
            return 0.0
        counts = [count for count, _ in self.points]
        index = bisect.bisect_left(counts, n)
        if index < len(counts) and counts[index] == n:
            return self.points[index][1]
        if index >= len(counts):
            return self.points[-1][1]
        low_n, low_x = (0, 0.0) if index == 0 else self.points[index - 1]
        high_n, high_x = self.points[index]
        return low_x + (high_x - low_x) * (n - low_n) / (high_n - low_n)

    def describe(self) -> str:
        shown = ", ".join(f"{n}:{x:.3g}" for n, x in self.points[:6])
        more = ", ..." if len(self.points) > 6 else ""
        return f"points({shown}{more})"


def scaled(curve: Curve, factor: float) -> Curve:
    """The same shape at ``factor`` times the rate (a prior matched to measurements)."""
    if isinstance(curve, UslCurve):
        return UslCurve(curve.per_trainer * factor, curve.serial, curve.comm)
    if isinstance(curve, PointsCurve):
        return PointsCurve(tuple((n, x * factor) for n, x in curve.points))
    raise TypeError(f"cannot scale {type(curve).__name__}")
