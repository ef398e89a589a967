"""Statistical efficiency: how much a larger batch is worth, measured from gradients.

A larger total batch M makes each step's gradient less noisy, but past the
*gradient noise scale* φ (McCandlish et al.'s B_noise, in samples) it stops
buying progress: the samples needed to reach a given loss grow as (φ + M) / φ.
Relative to the job's initial batch M₀, one sample at batch M is worth

    efficiency(M) = (φ + M₀) / (φ + M)

samples at M₀ (1 at M₀, below 1 above it). Progress counted in samples at M₀
("scale-invariant samples") is throughput × efficiency: *goodput* (Pollux).

φ = M₀ · var / sqr is estimated while training, from the gradients' squared norms
(the runtimes measure them; this module only does the arithmetic):

* ``count`` gradients were averaged (replicas × accumulation steps), each over
  M / count samples. ``L`` is the mean of their squared norms, ``T`` the squared
  norm of their average. Then (count·T − L)/(count − 1) is an unbiased estimate
  of |G|² (``sqr``) and (L − T)/(count − 1) of tr Σ / M, the variance of the
  averaged gradient; times scale = M / M₀ it is the variance at the initial
  batch (``var``). Both are smoothed by moving averages with bias correction.
* The gradients need not average equally many samples (a parameter server sums
  pushes of b_i samples each, weighted by b_i, into one update of B = Σ b_i):
  ``count`` = B · mean(1/b_i) then makes the same two formulas unbiased (it is the
  number of gradients when they are equal).
* Adam-like optimisers are measured on the gradients divided by their
  preconditioner (√ of the second-moment estimate, AdaptDL PR #95): the runtimes
  pass the squared norms of those (`edl.runtime.precondition`).
* A single gradient per step (one replica, no accumulation) has no spread to
  measure: two consecutive steps' gradients stand in for two replicas (a biased
  estimate, since the parameters moved in between; the averages restart when
  the job switches between the two).

The learning rate follows the batch by AdaScale's gain r = (var + sqr) /
(var / scale + sqr) (√r for Adam-like optimisers, whose steps are normalised).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["NoiseScaleEstimator", "adascale_gain", "effective_count", "efficiency"]

_MIN_VAR = 1e-12  # a variance estimate that went negative is noise around 0
_SMOOTHING = 0.999  # per initial batch of samples, as AdaptDL
_MIN_WINDOW_STEPS = 50  # but never fewer steps than this: at 1000x the initial batch
# AdaptDL's per-sample window is ~1.5 steps, and two replicas' spread is too noisy for it


def efficiency(noise_scale: float | None, initial_batch: float, batch: float) -> float:
    """Samples at ``initial_batch`` one sample at ``batch`` is worth, given φ.

    None or an infinite φ means no noise limit: every sample counts fully (1)."""
    if noise_scale is None or math.isinf(noise_scale):
        return 1.0
    phi = max(0.0, noise_scale)
    if phi + batch <= 0:
        return 1.0
    return (phi + initial_batch) / (phi + batch)


def adascale_gain(var: float, sqr: float, scale: float, *, adaptive: bool = False) -> float:
    """AdaScale's gain at ``scale`` = batch / initial batch: how much further one step
    at that batch goes than one at the initial batch; the learning rate is multiplied
    by it (its square root for Adam-like, ``adaptive``, optimisers)."""
    var, sqr = max(var, 0.0), max(sqr, 0.0)
    denominator = var / scale + sqr if scale > 0 else 0.0
    if denominator <= 0:
        return 1.0
    gain = (var + sqr) / denominator
    return math.sqrt(gain) if adaptive else gain


def effective_count(samples: Sequence[float]) -> float:
    """The ``count`` that keeps the estimator unbiased when gradient i averages
    ``samples[i]`` samples and they are summed weighted by their samples: B · mean(1/b_i)
    (the number of gradients when all are equal; 0 when any count is not positive)."""
    if not samples or min(samples) <= 0:
        return 0.0
    return float(sum(samples)) * sum(1.0 / b for b in samples) / len(samples)


@dataclass
class _Average:
    """An exponential moving average with its bias correction (starts at no weight)."""

    biased: float = 0.0
    weight: float = 0.0

    def update(self, value: float, keep: float) -> None:
        self.biased = keep * self.biased + (1.0 - keep) * value
        self.weight = keep * self.weight + (1.0 - keep)

    @property
    def value(self) -> float | None:
        return self.biased / self.weight if self.weight > 0 else None


@dataclass
class NoiseScaleEstimator:
    """Smoothed |G|² and variance at the initial batch, hence φ and the gain.

    Feed it one step at a time with `observe` (several gradients averaged) or
    `observe_pair` (one gradient: this step's and the previous one). Pure: no torch,
    so both runtimes and the tests share it.
    """

    smoothing: float = _SMOOTHING
    _sqr: _Average = field(default_factory=_Average)
    _var: _Average = field(default_factory=_Average)
    _paired: bool | None = None  # which estimator fed the averages
    steps: int = 0
    skipped: int = 0

    def observe(self, local_sqr: float, total_sqr: float, count: float, scale: float) -> bool:
        """One step: ``local_sqr`` = L (mean of the ``count`` gradients' squared norms),
        ``total_sqr`` = T (squared norm of their average), at ``scale`` = batch / initial
        batch. Returns False (and changes nothing) for a step it cannot use: fewer than
        two gradients, or a non-finite norm (a skipped mixed-precision step). ``count``
        for unequal gradients: `effective_count`."""
        return self._update(local_sqr, total_sqr, count, scale, paired=False)

    def observe_pair(
        self, previous_sqr: float, current_sqr: float, averaged_sqr: float, scale: float
    ) -> bool:
        """One replica without accumulation: the previous and this step's gradients'
        squared norms and that of their mean stand in for two replicas."""
        local = (previous_sqr + current_sqr) / 2.0
        return self._update(local, averaged_sqr, 2, 2.0 * scale, paired=True)

    def _update(
        self, local: float, total: float, count: float, scale: float, *, paired: bool
    ) -> bool:
        if not count >= 2 or scale <= 0 or not (math.isfinite(local) and math.isfinite(total)):
            self.skipped += 1
            return False
        if self._paired is not None and self._paired != paired:
            self._sqr, self._var = _Average(), _Average()  # the other estimator: restart
        self._paired = paired
        sqr = (count * total - local) / (count - 1)
        var = (local - total) * scale / (count - 1)
        # the window is ~1/(1-smoothing) initial batches of samples, and at least
        # _MIN_WINDOW_STEPS steps
        keep = max(self.smoothing**scale, 1.0 - 1.0 / _MIN_WINDOW_STEPS)
        self._sqr.update(sqr, keep)
        self._var.update(var, keep)
        self.steps += 1
        return True

    @property
    def raw(self) -> tuple[float, float] | None:
        """(|G|², variance) before clipping to their valid ranges: estimates of parts
        of one gradient (a pserver's shard) are summed first, then clipped."""
        sqr, var = self._sqr.value, self._var.value
        return None if sqr is None or var is None else (sqr, var)

    @property
    def sqr(self) -> float | None:
        """Estimated |G|² (None before the first usable step)."""
        value = self._sqr.value
        return None if value is None else max(value, 0.0)

    @property
    def var(self) -> float | None:
        """Estimated variance of a gradient at the initial batch."""
        value = self._var.value
        return None if value is None else max(value, _MIN_VAR)

    def noise_scale(self, initial_batch: float) -> float | None:
        """φ in samples (None: not measured yet; inf: no gradient signal left)."""
        sqr, var = self.sqr, self.var
        if sqr is None or var is None:
            return None
        if sqr <= 0:
            return math.inf
        return initial_batch * var / sqr

    def gain(self, scale: float, *, adaptive: bool = False) -> float:
        """AdaScale's gain at ``scale`` from the current estimates (1 before any)."""
        sqr, var = self.sqr, self.var
        if sqr is None or var is None:
            return 1.0
        return adascale_gain(var, sqr, scale, adaptive=adaptive)

    def to_dict(self) -> dict[str, float | int | bool | None]:
        """The state as JSON-able data (a checkpoint keeps it across restarts)."""
        return {
            "sqr_biased": self._sqr.biased, "sqr_weight": self._sqr.weight,
            "var_biased": self._var.biased, "var_weight": self._var.weight,
            "paired": self._paired, "steps": self.steps, "skipped": self.skipped,
        }

    @classmethod
    def from_dict(cls, data: dict[str, float | int | bool | None]) -> NoiseScaleEstimator:
        """An estimator continuing from `to_dict`'s output."""
        out = cls()
        out._sqr = _Average(float(data.get("sqr_biased") or 0.0),
                            float(data.get("sqr_weight") or 0.0))
        out._var = _Average(float(data.get("var_biased") or 0.0),
                            float(data.get("var_weight") or 0.0))
        paired = data.get("paired")
        out._paired = None if paired is None else bool(paired)
        out.steps = int(data.get("steps") or 0)
        out.skipped = int(data.get("skipped") or 0)
        return out
