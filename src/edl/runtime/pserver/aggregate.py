"""k pushes, one update: how a pserver gives a job that adapts its batch a defined batch.

Without ``spec.batch`` a pserver applies each trainer's push on its own (asynchronous
SGD: the batch is whatever one trainer computed). A job with ``spec.batch`` has a total
batch B (the Autoscaler's choice, else its initial batch M₀), and each trainer pushes
gradients of its own batch b; the pserver sums pushes, weighted by their samples,
until they reach B, and applies their mean as one update: k = B / b pushes.

Why this fits the asynchronous update and its fault tolerance:

* **Nothing waits.** A push is added to the pending sum and answered at once with the
  current parameters, as before (they change only when an update completes). So a
  trainer killed mid-aggregation blocks no one: the next pushes, from any trainer,
  complete the update. A trainer faster than the others may add two pushes to one
  update: two samples of the gradient at the same parameters, as valid as any.
* **Nothing is lost.** An update left incomplete (every trainer gone, the job at its
  end) is applied with what it has once it is ``flush_after`` seconds old, and the
  pending sum is part of the shard's checkpoint (a restarted pserver continues it).
* **Measured.** Each update gives the estimator (`edl.throughput.efficiency`) L, the
  mean of the pushes' squared norms on this shard, and T, the squared norm of their
  mean, with the effective count for unequal pushes; for Adam both through its
  preconditioner. Squared norms add over coordinates, so the job's |G|² and variance
  are the sums over the shards (`edl.throughput.shards`). An update of one push (the
  batch is one trainer's) is measured against the previous one (the pair rule).
  A push whose squared norm is not finite is dropped and counted, never applied.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from edl.runtime.precondition import preconditioned_sqnorm
from edl.throughput.efficiency import NoiseScaleEstimator, adascale_gain, effective_count

__all__ = ["Aggregation", "Pending"]

Precondition = Callable[[str], "torch.Tensor | None"]


@dataclass
class Pending:
    """The pushes of the update being gathered: Σ bᵢ·gᵢ per block, each bᵢ and |gᵢ|²."""

    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    samples: list[int] = field(default_factory=list)
    sqnorms: list[float] = field(default_factory=list)
    opened_at: float = 0.0


class Aggregation:
    """One shard's pending update, its noise-scale estimator and counters (no lock:
    the shard calls it under its own)."""

    def __init__(self, initial_batch: int, *, flush_after: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if initial_batch < 1:
            raise ValueError("initial_batch must be >= 1")
        self.initial_batch = initial_batch
        self.target = initial_batch
        self.flush_after = flush_after
        self.clock = clock
        self.estimator = NoiseScaleEstimator()
        self.job_estimate: tuple[float, float] | None = None  # (var, sqr) over all shards
        self.pending: Pending | None = None
        self.received = 0  # pushes taken into a pending update
        self.applied = 0  # pushes applied in an update
        self.skipped = 0  # pushes dropped: non-finite squared norm
        self.updates = 0
        self.last_batch = 0  # samples in the last update
        self.last_gain = 1.0
        self._previous: dict[str, torch.Tensor] | None = None  # one-push updates' pair

    def add(self, grads: Mapping[str, torch.Tensor], samples: int, sqnorm: float) -> bool:
        """One push of ``samples`` samples whose squared norm on this shard is ``sqnorm``;
        True when the pending update has reached the target batch."""
        if not math.isfinite(sqnorm) or sqnorm < 0:
            self.skipped += 1
            return False
        pending = self.pending
        if pending is None:
            pending = self.pending = Pending(opened_at=self.clock())
        for key, grad in grads.items():
            if key in pending.sums:
                pending.sums[key].add_(grad, alpha=samples)
            else:
                pending.sums[key] = grad.mul(samples)
        pending.samples.append(samples)
        pending.sqnorms.append(sqnorm)
        self.received += 1
        return sum(pending.samples) >= self.target

    def stale(self) -> bool:
        """An incomplete update older than ``flush_after``: apply it with what it has."""
        pending = self.pending
        return pending is not None and self.clock() - pending.opened_at >= self.flush_after

    def take(
        self, precondition: Precondition, adaptive: bool
    ) -> tuple[dict[str, torch.Tensor], float]:
        """The pending update's mean gradient and the learning-rate multiplier to apply it
        with (AdaScale's gain at its batch; √ for Adam); measures it first."""
        pending, self.pending = self.pending, None
        assert pending is not None and pending.samples, "take() without a pending update"
        total = sum(pending.samples)
        mean = {key: summed.div_(total) for key, summed in pending.sums.items()}
        scale = total / self.initial_batch
        norm = sum(preconditioned_sqnorm(g, precondition(k)) for k, g in mean.items())
        if len(pending.samples) >= 2:
            self._previous = None
            self.estimator.observe(sum(pending.sqnorms) / len(pending.sqnorms), norm,
                                   effective_count(pending.samples), scale)
        elif total >= self.target:  # the batch is one push: pair it with the last one
            self._observe_pair(mean, pending.sqnorms[0], scale, precondition)
        self.applied += len(pending.samples)
        self.updates += 1
        self.last_batch = total
        self.last_gain = self.gain(scale, adaptive=adaptive)
        return mean, self.last_gain

    def gain(self, scale: float, *, adaptive: bool) -> float:
        """AdaScale's gain from the job's estimate (all shards), else this shard's."""
        if self.job_estimate is not None:
            var, sqr = self.job_estimate
            return adascale_gain(var, sqr, scale, adaptive=adaptive)
        return self.estimator.gain(scale, adaptive=adaptive)

    def _observe_pair(self, mean: dict[str, torch.Tensor], sqnorm: float, scale: float,
                      precondition: Precondition) -> None:
        previous, self._previous = self._previous, {k: g.clone() for k, g in mean.items()}
        if previous is None or previous.keys() != mean.keys():
            return
        before = sum(preconditioned_sqnorm(g, precondition(k)) for k, g in previous.items())
        both = sum(preconditioned_sqnorm((previous[k] + g) / 2, precondition(k))
                   for k, g in mean.items())
        self.estimator.observe_pair(before, sqnorm, both, scale)

    # -- what the pserver publishes and checkpoints -------------------------------------
    def record(self, adaptive: bool) -> dict[str, Any]:
        """This shard's figures for the job's etcd (`edl.throughput.shards` sums them)."""
        pending, raw = self.pending, self.estimator.raw
        return {  # unclipped: the shards' estimates are summed, then clipped
            "sqr": None if raw is None else raw[0], "var": None if raw is None else raw[1],
            "initial_batch": self.initial_batch, "batch": self.target,
            "last_batch": self.last_batch, "adaptive": adaptive, "gain": round(self.last_gain, 6),
            "updates": self.updates, "received": self.received, "applied": self.applied,
            "pending": 0 if pending is None else len(pending.samples),
            "skipped": self.skipped, "measured": self.estimator.steps,
        }

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able state, the pending sums as arrays) for a checkpoint."""
        pending = self.pending
        meta = {
            "target": self.target, "estimator": self.estimator.to_dict(),
            "received": self.received, "applied": self.applied, "skipped": self.skipped,
            "updates": self.updates,
            "samples": [] if pending is None else list(pending.samples),
            "sqnorms": [] if pending is None else list(pending.sqnorms),
        }
        sums = {} if pending is None else {k: v.numpy().copy() for k, v in pending.sums.items()}
        return meta, sums

    def restore(self, meta: Mapping[str, Any], sums: Mapping[str, np.ndarray]) -> None:
        """Continue from `state`'s output (the pending update reopens now)."""
        self.target = int(meta.get("target") or self.initial_batch)
        self.estimator = NoiseScaleEstimator.from_dict(dict(meta.get("estimator") or {}))
        for name in ("received", "applied", "skipped", "updates"):
            setattr(self, name, int(meta.get(name) or 0))
        samples = [int(b) for b in meta.get("samples") or []]
        self.pending = None
        if samples and sums:
            self.pending = Pending({k: torch.from_numpy(v.copy()) for k, v in sums.items()},
                                   samples, [float(x) for x in meta.get("sqnorms") or []],
                                   self.clock())
