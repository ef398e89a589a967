"""Goodput against trainers and batch: which total batch makes a job progress fastest.

A job that adapts its batch (it declares `BatchLimits`) is valued by *goodput*:
throughput at (n trainers, total batch M) times the statistical efficiency of M
(`edl.throughput.efficiency`). Throughput depends on the batch because a step has
two parts: computing the local gradient, proportional to the per-trainer batch
M / n, and a per-step overhead that does not depend on it (synchronising
gradients, pushing to and pulling from pservers):

    step time t(n, M) = (M / n) / r + s(n),    X(n, M) = M / t(n, M)

``r`` is one trainer's rate with no overhead, the curve's rate at one trainer
(or X₀(n)/n where a curve is superlinear: then there is no overhead to amortise),
and s(n) is read off the job's scaling curve X₀(n), measured at the per-trainer
batch b₀ = M₀ / n₀ of a job that does not adapt: s(n) = n·b₀ / X₀(n) − b₀ / r.
So at b₀ the model is the curve itself, and a larger per-trainer batch amortises
the overhead (Pollux's throughput model, with its fitted terms replaced by the
curve edl already fits). Goodput M / t(n, M) × (φ + M₀)/(φ + M) is unimodal in M
with its peak at M* = √(n·r·s(n)·φ): larger batches pay off when the overhead is
large and the gradient noisy (φ large), and φ grows as training goes on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from edl.throughput.curve import Curve
from edl.throughput.efficiency import efficiency

__all__ = [
    "BatchLimits",
    "FixedBatchCurve",
    "GoodputCurve",
    "at_declared_batch",
    "best_batch",
    "compute_rate",
    "fixed_goodput",
    "limits_from_spec",
    "step_overhead",
    "throughput_at",
]


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """A job's batch bounds: ``initial`` total batch at ``trainers`` trainers (its
    per-trainer batch is what a job that does not adapt keeps), the largest total
    batch ``max``, and ``per_trainer_max`` where a trainer's memory binds."""

    initial: int
    trainers: int
    max: int
    per_trainer_max: int | None = None

    def __post_init__(self) -> None:
        if self.initial < 1 or self.trainers < 1 or self.max < self.initial:
            raise ValueError("BatchLimits: need 1 <= initial <= max and trainers >= 1")
        if self.per_trainer_max is not None and self.per_trainer_max < 1:
            raise ValueError("BatchLimits: per_trainer_max must be >= 1")

    @property
    def base(self) -> float:
        """Per-trainer batch of the job as declared (what a non-adapting run keeps)."""
        return self.initial / self.trainers

    def fixed(self, n: int) -> float:
        """Total batch at ``n`` trainers when the per-trainer batch stays as declared."""
        return n * self.base

    def bounds(self, n: int) -> tuple[int, int]:
        """(lowest, highest) total batch an adapting job may use at ``n`` trainers:
        from the initial batch (less only where trainers' memory forces it) to max."""
        high = self.max
        if self.per_trainer_max is not None:
            high = min(high, max(1, n) * self.per_trainer_max)
        return min(self.initial, high), high


def compute_rate(curve: Curve, n: int, measured: float | None = None) -> float:
    """r: one trainer's samples/s computing alone (no per-step overhead) at ``n``: the
    ``measured`` one when the runtime reports it, else the curve's rate at one trainer
    (a curve known only at one count says nothing of its overhead: the measured rate
    does); never below X(n)/n, where there is no overhead left to amortise."""
    if n <= 0:
        return 0.0
    single = measured if measured is not None and measured > 0 else curve.rate(1)
    return max(single, curve.rate(n) / n)


def step_overhead(curve: Curve, n: int, base: float, measured: float | None = None) -> float:
    """s(n): seconds of a step at ``n`` trainers that do not scale with the batch."""
    rate, single = curve.rate(n), compute_rate(curve, n, measured)
    if single <= 0 or rate <= 0:
        return 0.0
    return max(0.0, n * base / rate - base / single)


def throughput_at(
    curve: Curve, n: int, batch: float, base: float, measured: float | None = None
) -> float:
    """Samples/s at ``n`` trainers and total ``batch``, the curve being at per-trainer
    batch ``base`` (the module doc's step-time model; ``measured``: the compute rate)."""
    if n <= 0 or batch <= 0:
        return 0.0
    single = compute_rate(curve, n, measured)
    if single <= 0:
        return 0.0
    step = (batch / n) / single + step_overhead(curve, n, base, measured)
    return batch / step


def fixed_goodput(
    curve: Curve, n: int, limits: BatchLimits, noise_scale: float | None
) -> float:
    """Goodput of a job that keeps its per-trainer batch: its batch grows with n."""
    return curve.rate(n) * efficiency(noise_scale, limits.initial, limits.fixed(n))


def best_batch(
    curve: Curve, n: int, limits: BatchLimits, noise_scale: float | None,
    measured: float | None = None,
) -> tuple[int, float]:
    """(total batch, goodput) of the best batch at ``n`` trainers; ties go to the
    smaller batch. ``noise_scale`` None: efficiency off (throughput alone);
    ``measured``: the compute rate the runtime reports."""
    low, high = limits.bounds(n)
    if n <= 0:
        return low, 0.0
    candidates = {low, high}
    overhead = step_overhead(curve, n, limits.base, measured)
    phi = noise_scale
    if phi is not None and math.isfinite(phi) and overhead > 0:
        single = compute_rate(curve, n, measured)
        peak = math.sqrt(max(0.0, n * single * overhead * phi))
        for near in (math.floor(peak), math.ceil(peak)):
            candidates.add(min(high, max(low, near)))
    best, value = low, -math.inf
    for batch in sorted(candidates):
        goodput = throughput_at(curve, n, batch, limits.base, measured) * efficiency(
            phi, limits.initial, batch
        )
        if goodput > value:
            best, value = batch, goodput
    return best, value


@dataclass(frozen=True, slots=True)
class FixedBatchCurve:
    """Goodput of a job that keeps its declared per-trainer batch (its total batch grows
    with its trainers), as a `Curve`: what allocation without batch adaptation sees."""

    throughput: Curve
    limits: BatchLimits
    noise_scale: float | None

    def rate(self, n: int) -> float:
        return fixed_goodput(self.throughput, n, self.limits, self.noise_scale) if n > 0 else 0.0

    def describe(self) -> str:
        phi = "off" if self.noise_scale is None else f"{self.noise_scale:.4g}"
        return (f"goodput of {self.throughput.describe()} at its declared per-trainer "
                f"batch {self.limits.base:g}, noise scale {phi}")


@dataclass(frozen=True)
class GoodputCurve:
    """The best goodput at each trainer count, as a `Curve` (scale-invariant samples/s):
    what `marginal.allocate` sizes an adapting job by."""

    throughput: Curve
    limits: BatchLimits
    noise_scale: float | None
    compute_rate: float | None = None  # measured by the runtime (None: from the curve)
    _cache: dict[int, tuple[int, float]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def best(self, n: int) -> tuple[int, float]:
        """(batch, goodput) at ``n`` trainers."""
        hit = self._cache.get(n)
        if hit is None:
            hit = self._cache[n] = best_batch(
                self.throughput, n, self.limits, self.noise_scale, self.compute_rate
            )
        return hit

    def rate(self, n: int) -> float:
        return self.best(n)[1] if n > 0 else 0.0

    def describe(self) -> str:
        phi = "off" if self.noise_scale is None else f"{self.noise_scale:.4g}"
        return (f"goodput of {self.throughput.describe()}, batch {self.limits.initial}"
                f"..{self.limits.max}, noise scale {phi}")


def limits_from_spec(
    initial: int | None, maximum: int | None, per_trainer_max: int | None, trainers: int
) -> BatchLimits | None:
    """A job's `BatchLimits` from its (validated) `spec.batch`, the initial batch being
    at ``trainers`` (min-instance); None when the job does not adapt its batch."""
    if initial is None or initial < 1:
        return None
    top = max(initial, maximum or initial)
    return BatchLimits(initial, max(1, trainers), top, per_trainer_max)


def at_declared_batch(
    single: float | None, n: int, batch: float, measured: float, base: float
) -> float:
    """What ``measured`` samples/s at total ``batch`` would have been at the declared
    per-trainer batch ``base``: the step-time model inverted with the measured compute
    rate ``single`` (one trainer's samples/s without synchronisation). Fits stay in one
    unit whatever batch a job ran at."""
    if single is None or single <= 0 or n <= 0 or batch <= 0 or measured <= 0:
        return measured
    if abs(batch - n * base) < 0.5:
        return measured
    overhead = max(0.0, batch / measured - (batch / n) / single)
    return n * base / (base / single + overhead)
