"""Fit a job's scaling curve online from (trainers, samples/s) measurements.

The runtime publishes the job's throughput against its contributing trainer count
(`Observation`). `OnlineFit` keeps a bounded window of them, averages per trainer
count, and answers `curve()`:

* no measurement yet: the job's declared prior (or None);
* two counts at least 1.5x apart: a serial-fraction fit (κ = 0) of the two;
* otherwise (one count, or two close ones): the prior's *shape*, scaled so it
  matches what was measured (one count says nothing about scaling); without a
  prior, linear scaling through the measurements (optimistic on purpose: a job
  that was never grown gets a chance to show it scales);
* enough counts: a Universal Scalability Law fit (`fit_usl`) of the measurements.

Measurements only at large counts say nothing about small ones: 282 samples/s at
both 20 and 40 trainers fits "flat from one trainer" as well as "flat beyond 8".
So while no count below ``_ANCHOR_BELOW`` has been measured, a two-count fit gets an
*anchor* at one trainer, weighted a fifth of a measured count: the prior's rate
there, or without a prior the best measured rate per trainer (a USL job's rate per
trainer only falls as it grows, so that is the least its first trainer does). A
real measurement replaces it; three counts let the fit bend (κ) and need none.

`fit_usl` minimises the squared *relative* error over a fixed log grid of (σ, κ)
with the closed-form best rate per grid point: deterministic, no optimiser to
diverge on three noisy points, and ~4,000 grid points cost well under a millisecond.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from edl.throughput.curve import Curve, UslCurve, scaled

__all__ = ["MIN_DISTINCT_COUNTS", "Observation", "OnlineFit", "fit_usl"]

MIN_DISTINCT_COUNTS = 3
_ANCHOR_BELOW = 3  # a measured count below this pins the curve's start
_ANCHOR_WEIGHT = 0.2  # the anchor is a guess: a fifth of a measured count
_MIN_SPREAD = 1.5  # two counts this far apart say how the job scales; closer, noise dominates
_SERIAL = np.concatenate([[0.0], np.geomspace(1e-3, 1.0, 70)])
_COMM = np.concatenate([[0.0], np.geomspace(1e-5, 0.2, 60)])


@dataclass(frozen=True, slots=True)
class Observation:
    """The job's throughput at one moment: ``trainers`` contributing, ``samples_per_s``.

    A job that adapts its batch also reports the total ``batch`` it ran at, its
    measured gradient ``noise_scale`` (samples) and ``compute_rate``: one trainer's
    samples/s in its forward and backward passes alone (no synchronisation), which
    splits a step into the part a batch scales and the part it does not
    (`edl.throughput.batch`); its ``remaining_samples`` are then counted at its
    initial batch (`edl.throughput.efficiency`). ``resize_pause_s``: the pause its
    latest resize cost, ``resizes`` how many were measured (`edl.throughput.pause`)."""

    at: float
    trainers: int
    samples_per_s: float
    remaining_samples: float | None = None
    batch: float | None = None
    noise_scale: float | None = None
    compute_rate: float | None = None
    resize_pause_s: float | None = None  # the latest resize's measured pause
    resizes: int | None = None  # resizes measured so far (says whether the pause is new)


def fit_usl(
    points: Sequence[tuple[int, float]],
    *,
    comm: bool = True,
    weights: Sequence[float] | None = None,
) -> UslCurve:
    """The USL curve closest (relative squared error, optionally weighted per point) to
    ``points`` (trainers, samples/s)."""
    weights = [1.0] * len(points) if weights is None else list(weights)
    usable = [(n, x, w) for (n, x), w in zip(points, weights, strict=True) if n > 0 and x > 0]
    if not usable:
        raise ValueError("fit_usl: needs a point with trainers > 0 and samples/s > 0")
    n = np.array([p[0] for p in usable], dtype=float)
    x = np.array([p[1] for p in usable], dtype=float)
    w = np.array([p[2] for p in usable], dtype=float)
    serial = _SERIAL[:, None, None]
    comms = (_COMM if comm else _COMM[:1])[None, :, None]
    shape = n / (1.0 + serial * (n - 1.0) + comms * n * (n - 1.0))  # X(n) / r
    g = shape / x  # relative: minimise sum (r*g - 1)^2
    rate = (w * g).sum(axis=2) / np.maximum((w * g * g).sum(axis=2), 1e-300)
    error = (w * (rate[..., None] * g - 1.0) ** 2).sum(axis=2)
    i, j = np.unravel_index(int(np.argmin(error)), error.shape)
    return UslCurve(float(rate[i, j]), float(_SERIAL[i]), float((_COMM if comm else _COMM[:1])[j]))


class OnlineFit:
    """A job's scaling curve from its recent observations, falling back on a prior.

    Memory is per trainer count (the newest ``per_count`` observations of each of the
    ``counts`` most recently seen counts), so a job that stays at one size for an hour
    does not forget how it ran at the others.
    """

    def __init__(self, prior: Curve | None = None, counts: int = 24, per_count: int = 8) -> None:
        self.prior = prior
        self._by_count: dict[int, deque[float]] = {}
        self._counts = counts
        self._per_count = per_count
        self._latest: Observation | None = None
        self._cached: Curve | None = None
        self._dirty = True
        self.method = "no curve"  # how the current curve was obtained, for reasons

    def set_prior(self, prior: Curve | None) -> None:
        self.prior = prior
        self._dirty = True

    def add(self, observation: Observation) -> None:
        if observation.trainers <= 0 or observation.samples_per_s <= 0:
            return  # nothing running says nothing about the curve
        n = observation.trainers
        values = self._by_count.pop(n, None) or deque(maxlen=self._per_count)
        values.append(observation.samples_per_s)
        self._by_count[n] = values  # re-inserted: dict order is recency
        while len(self._by_count) > self._counts:
            del self._by_count[next(iter(self._by_count))]
        self._latest = observation
        self._dirty = True

    def extend(self, observations: Iterable[Observation]) -> None:
        for observation in observations:
            self.add(observation)

    def points(self) -> list[tuple[int, float]]:
        """Mean samples/s per trainer count over its newest observations."""
        return sorted((n, sum(v) / len(v)) for n, v in self._by_count.items())

    def latest(self) -> Observation | None:
        return self._latest

    def curve(self) -> Curve | None:
        if self._dirty:
            self._cached = self._fit()
            self._dirty = False
        return self._cached

    def _anchored(self, points: list[tuple[int, float]]) -> list[tuple[int, float]]:
        """``points`` with the anchor at one trainer while no small count is measured."""
        if points[0][0] < _ANCHOR_BELOW:
            return points
        prior_rate = self.prior.rate(1) if self.prior is not None else 0.0
        rate = prior_rate if prior_rate > 0 else max(x / n for n, x in points)
        return [(1, rate), *points]

    def _fit(self) -> Curve | None:
        points = self.points()
        if not points:
            self.method = "declared prior" if self.prior is not None else "no curve"
            return self.prior
        spread = points[-1][0] / points[0][0]
        if len(points) >= MIN_DISTINCT_COUNTS or (len(points) == 2 and spread >= _MIN_SPREAD):
            # with three counts the fit can bend (κ); with two it cannot: anchor those
            anchored = points if len(points) >= MIN_DISTINCT_COUNTS else self._anchored(points)
            weights = [1.0] * len(points)
            extra = ""
            if len(anchored) > len(points):
                weights.insert(0, _ANCHOR_WEIGHT)
                extra = " and an anchor at 1"
            if len(anchored) >= MIN_DISTINCT_COUNTS:
                self.method = f"fit of {len(points)} trainer counts{extra}"
                return fit_usl(anchored, weights=weights)
            self.method = "serial-fraction fit of 2 trainer counts"
            # two sizes far apart: a serial fraction
            return fit_usl(anchored, comm=False, weights=weights)
        if self.prior is not None:
            predicted = [self.prior.rate(n) for n, _ in points]
            if all(p > 0 for p in predicted):
                # relative least squares: the mean ratio of measured to predicted
                factor = sum(x / p for (_, x), p in zip(points, predicted, strict=True))
                self.method = f"prior scaled to {len(points)} measured counts"
                return scaled(self.prior, factor / len(points))
        self.method = f"{len(points)} measured counts, linear beyond"
        n, x = points[-1]
        return UslCurve(x / n)
