"""Progress of a job whose gradient noise limits its batch (pure; used by `sim/work.py`).

A job with ``noise_scale`` counts its work in samples at its initial batch M₀.
At total batch M its φ — rising linearly from ``start`` to ``end`` over its
progress p ∈ [0, 1] — makes one sample worth (φ(p) + M₀)/(φ(p) + M) of one at M₀,
so at raw throughput X (samples/s) over W samples of work

    dp/dt = X · (φ(p) + M₀) / ((φ(p) + M) · W).

With φ(p) = a + b·p the time from p₀ to p₁ has a closed form,

    t = W/X · [(p₁ − p₀) + (M − M₀)/b · ln((a + b·p₁ + M₀) / (a + b·p₀ + M₀))],

so the simulator's completion timer is exact; the progress after a time is that
formula inverted by bisection (it is monotone in p₁).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["NoiseRamp", "progress_after", "seconds_to"]

_BISECTIONS = 60


@dataclass(frozen=True, slots=True)
class NoiseRamp:
    """φ (samples) at the start and at the end of the job's work, linear in between."""

    start: float
    end: float

    def at(self, progress: float) -> float:
        return self.start + (self.end - self.start) * min(1.0, max(0.0, progress))


def _work_factor(p0: float, p1: float, batch: float, initial: float, ramp: NoiseRamp) -> float:
    """∫ (φ(p) + M)/(φ(p) + M₀) dp from p0 to p1."""
    a, b = ramp.start, ramp.end - ramp.start
    extra = batch - initial
    if extra == 0:
        return p1 - p0
    low = a + b * p0 + initial
    if abs(b) <= 1e-9 * max(1.0, abs(low)):  # φ constant: no log
        middle = a + b * (p0 + p1) / 2 + initial
        return (p1 - p0) * (1.0 + extra / middle)
    # log1p of the relative rise, not log(high / low): when φ barely changes, the ratio's
    # rounding (1e-16) divided by a tiny slope b swamped the answer (hypothesis: start 2,
    # end 2.00001 put the inverse 2e-9 off)
    return (p1 - p0) + extra / b * math.log1p(b * (p1 - p0) / low)


def seconds_to(
    p0: float, p1: float, *, rate: float, batch: float, initial: float, ramp: NoiseRamp,
    total: float,
) -> float:
    """Seconds to go from progress ``p0`` to ``p1`` at raw ``rate`` and total ``batch``
    (inf when the job makes no progress)."""
    if p1 <= p0:
        return 0.0
    if rate <= 0:
        return math.inf
    return total / rate * _work_factor(p0, p1, batch, initial, ramp)


def progress_after(
    p0: float, seconds: float, *, rate: float, batch: float, initial: float, ramp: NoiseRamp,
    total: float,
) -> float:
    """Progress ``seconds`` after ``p0`` (capped at 1)."""
    if seconds <= 0 or rate <= 0:
        return p0

    def until(p1: float) -> float:
        return seconds_to(p0, p1, rate=rate, batch=batch, initial=initial, ramp=ramp, total=total)

    if until(1.0) <= seconds:
        return 1.0
    low, high = p0, 1.0
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        if until(middle) < seconds:
            low = middle
        else:
            high = middle
    return (low + high) / 2
