"""A throughput observation from the master's published progress (pure).

The master writes its progress JSON to etcd about once a second (`TaskQueue.progress`):
``samples_per_s`` (sum over live trainers), ``contributing`` (trainers that finished
tasks recently — one that just joined counts once it produces) and
``remaining_samples``; a job adapting its batch also its ``batch`` and ``noise_scale``
(summed over its pservers' shards, `edl.throughput.shards`). That is one point
(trainers, samples/s) of the job's scaling curve; `edl run` and `edl controller` turn
it into an `Observation`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from edl.throughput.fit import Observation

__all__ = ["observation_from_metrics", "observation_from_progress"]


def observation_from_progress(progress: Mapping[str, Any] | None, at: float) -> Observation | None:
    """The progress as an observation at ``at``; None if it holds no usable point."""
    if not progress or progress.get("finished"):
        return None
    try:
        trainers = int(progress.get("contributing") or 0)
        rate = float(progress.get("samples_per_s") or 0.0)
        remaining = progress.get("remaining_samples")
        remaining = None if remaining is None else float(remaining)
    except (TypeError, ValueError):
        return None
    if trainers <= 0 or rate <= 0:
        return None
    batch, phi = _positive(progress.get("batch")), _positive(progress.get("noise_scale"))
    return Observation(at, trainers, rate, remaining, batch, phi)


def _positive(value: Any) -> float | None:
    """A finite positive figure (None: absent or unusable)."""
    try:
        number = None if value is None else float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number is not None and 0 < number < math.inf else None


def observation_from_metrics(metrics: Mapping[str, Any] | None, at: float) -> Observation | None:
    """A collective job's metrics record as an observation (None: no usable point).

    `edl.runtime.collective.adaptive.AdaptiveBatch` reports ``trainers``,
    ``samples_per_s``, ``batch`` and ``noise_scale`` with each metrics line; the agent
    publishes the merged record (`keys.metrics_key`)."""
    if not metrics:
        return None
    try:
        trainers = int(metrics.get("trainers") or 0)
        rate = float(metrics.get("samples_per_s") or 0.0)
        batch, phi = metrics.get("batch"), metrics.get("noise_scale")
        batch = None if batch is None else float(batch)
        phi = None if phi is None else float(phi)
    except (TypeError, ValueError, OverflowError):
        return None
    if trainers <= 0 or not (0 < rate < math.inf):
        return None
    usable = [None if x is None or not 0 < x < math.inf else x for x in (batch, phi)]
    return Observation(at, trainers, rate, None, *usable)
