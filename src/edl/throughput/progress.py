"""A throughput observation from the master's published progress (pure).

The master writes its progress JSON to etcd about once a second (`TaskQueue.progress`):
``samples_per_s`` (sum over live trainers), ``contributing`` (trainers that finished
tasks recently — one that just joined counts once it produces) and
``remaining_samples``. That is one point (trainers, samples/s) of the job's scaling
curve; `edl run` and `edl controller` turn it into an `Observation`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edl.throughput.fit import Observation

__all__ = ["observation_from_progress"]


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
    return Observation(at, trainers, rate, remaining)
