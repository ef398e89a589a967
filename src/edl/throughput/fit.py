"""Fit a job's scaling curve online from (trainers, samples/s) measurements.

The runtime publishes the job's throughput against its contributing trainer count
(`Observation`). `OnlineFit` keeps a bounded window of them, averages per trainer
count, and answers `curve()`:

* no measurement yet: the job's declared prior (or None);
* fewer than `MIN_DISTINCT_COUNTS` distinct trainer counts: the prior's *shape*,
  scaled so it matches what was measured (one count says nothing about scaling);
  without a prior, linear scaling through the measurements (optimistic on purpose:
  a job that was never grown gets a chance to show it scales);
* enough counts: a Universal Scalability Law fit (`fit_usl`) of the measurements.

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
_SERIAL = np.concatenate([[0.0], np.geomspace(1e-3, 1.0, 70)])
_COMM = np.concatenate([[0.0], np.geomspace(1e-5, 0.2, 60)])


@dataclass(frozen=True, slots=True)
class Observation:
    """The job's throughput at one moment: ``trainers`` contributing, ``samples_per_s``."""

    at: float
    trainers: int
    samples_per_s: float
    remaining_samples: float | None = None


def fit_usl(points: Sequence[tuple[int, float]], *, comm: bool = True) -> UslCurve:
    """The USL curve closest (relative squared error) to ``points`` (trainers, samples/s)."""
    usable = [(n, x) for n, x in points if n > 0 and x > 0]
    if not usable:
        raise ValueError("fit_usl: needs a point with trainers > 0 and samples/s > 0")
    n = np.array([p[0] for p in usable], dtype=float)
    x = np.array([p[1] for p in usable], dtype=float)
    serial = _SERIAL[:, None, None]
    comms = (_COMM if comm else _COMM[:1])[None, :, None]
    shape = n / (1.0 + serial * (n - 1.0) + comms * n * (n - 1.0))  # X(n) / r
    g = shape / x  # relative: minimise sum (r*g - 1)^2
    rate = g.sum(axis=2) / np.maximum((g * g).sum(axis=2), 1e-300)
    error = ((rate[..., None] * g - 1.0) ** 2).sum(axis=2)
    i, j = np.unravel_index(int(np.argmin(error)), error.shape)
    return UslCurve(float(rate[i, j]), float(_SERIAL[i]), float((_COMM if comm else _COMM[:1])[j]))


class OnlineFit:
    """A job's scaling curve from its recent observations, falling back on a prior."""

    def __init__(self, prior: Curve | None = None, window: int = 64, per_count: int = 8) -> None:
        self.prior = prior
        self._window: deque[Observation] = deque(maxlen=window)
        self._per_count = per_count
        self._cached: Curve | None = None
        self._dirty = True

    def set_prior(self, prior: Curve | None) -> None:
        self.prior = prior
        self._dirty = True

    def add(self, observation: Observation) -> None:
        if observation.trainers <= 0 or observation.samples_per_s <= 0:
            return  # nothing running says nothing about the curve
        self._window.append(observation)
        self._dirty = True

    def extend(self, observations: Iterable[Observation]) -> None:
        for observation in observations:
            self.add(observation)

    def points(self) -> list[tuple[int, float]]:
        """Mean samples/s per trainer count over its latest ``per_count`` observations."""
        by_count: dict[int, list[float]] = {}
        for observation in reversed(self._window):
            values = by_count.setdefault(observation.trainers, [])
            if len(values) < self._per_count:
                values.append(observation.samples_per_s)
        return sorted((n, sum(v) / len(v)) for n, v in by_count.items())

    def latest(self) -> Observation | None:
        return self._window[-1] if self._window else None

    def curve(self) -> Curve | None:
        if self._dirty:
            self._cached = self._fit()
            self._dirty = False
        return self._cached

    def _fit(self) -> Curve | None:
        points = self.points()
        if not points:
            return self.prior
        if len(points) >= MIN_DISTINCT_COUNTS:
            return fit_usl(points)
        if self.prior is not None:
            predicted = [self.prior.rate(n) for n, _ in points]
            if all(p > 0 for p in predicted):
                # least squares in relative terms: factor = mean of measured / predicted
                factor = sum(x / p for (_, x), p in zip(points, predicted, strict=True))
                return scaled(self.prior, factor / len(points))
        if len(points) == 1:
            n, x = points[0]
            return UslCurve(x / n)
        return fit_usl(points, comm=False)
