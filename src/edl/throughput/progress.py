"""A throughput observation from the master's published progress (pure).

The master writes its progress JSON to etcd about once a second (`TaskQueue.progress`):
``samples_per_s`` (sum over live trainers), ``contributing`` (trainers that finished
tasks recently — one that just joined counts once it produces) and
``remaining_samples``; a job adapting its batch also its ``batch`` and ``noise_scale``
(summed over its pservers' shards, `edl.throughput.shards`) and its trainers'
``compute_rate`` (`edl.runtime.master.batch`); once a resize was measured, its pause
and the resize count (`edl.throughput.pause`). That is one point
(trainers, samples/s) of the job's scaling curve; `edl run` and `edl controller` turn
it into an `Observation`. Both records come from other processes: every value is
checked first (`edl.throughput.records`); a point without a usable trainer count and
rate is no point.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edl.throughput.fit import Observation
from edl.throughput.pause import PAUSE, RESIZES
from edl.throughput.records import POSITIVE, POSITIVE_BATCH, RATE, Field, clean

__all__ = ["observation_from_metrics", "observation_from_progress"]


MAX_TRAINERS = 1e6
TRAINERS = Field(0.0, MAX_TRAINERS, integer=True)
PROGRESS_FIELDS: dict[str, Field] = {
    "contributing": TRAINERS, "samples_per_s": RATE, "remaining_samples": RATE,
    "batch": POSITIVE_BATCH, "noise_scale": POSITIVE, "compute_rate": POSITIVE,
    "resize_pause_s": PAUSE, "resizes": RESIZES,
}
METRICS_FIELDS: dict[str, Field] = {
    "trainers": TRAINERS, "samples_per_s": RATE, "batch": POSITIVE_BATCH, "noise_scale": POSITIVE,
    "compute_rate": POSITIVE, "resize_pause_s": PAUSE, "resizes": RESIZES,
}


def observation_from_progress(progress: Mapping[str, Any] | None, at: float) -> Observation | None:
    """The progress as an observation at ``at``; None if it holds no usable point."""
    if not progress or not isinstance(progress, Mapping) or progress.get("finished"):
        return None
    values = clean(progress, PROGRESS_FIELDS, "master progress record")
    trainers, rate = int(values.get("contributing", 0)), values.get("samples_per_s", 0.0)
    if trainers <= 0 or rate <= 0:
        return None
    return Observation(at, trainers, rate, values.get("remaining_samples"),
                       values.get("batch"), values.get("noise_scale"),
                       compute_rate=values.get("compute_rate"), **_pause(values))


def observation_from_metrics(metrics: Mapping[str, Any] | None, at: float) -> Observation | None:
    """A collective job's metrics record as an observation (None: no usable point).

    `edl.runtime.collective.adaptive.AdaptiveBatch` reports ``trainers``,
    ``samples_per_s``, ``batch``, ``noise_scale`` and ``compute_rate`` with each metrics
    line; the agent publishes the merged record (`keys.metrics_key`)."""
    if not metrics or not isinstance(metrics, Mapping):
        return None
    values = clean(metrics, METRICS_FIELDS, "collective metrics record")
    trainers, rate = int(values.get("trainers", 0)), values.get("samples_per_s", 0.0)
    if trainers <= 0 or rate <= 0:
        return None
    return Observation(at, trainers, rate, None, values.get("batch"), values.get("noise_scale"),
                       compute_rate=values.get("compute_rate"), **_pause(values))


def _pause(values: Mapping[str, float]) -> dict[str, Any]:
    """The record's measured resize pause and resize count (`edl.throughput.pause`)."""
    count = values.get("resizes")
    return {"resize_pause_s": values.get("resize_pause_s"),
            "resizes": int(count) if count is not None else None}
