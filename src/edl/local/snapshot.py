"""Assemble a `RunSnapshot` from what the run observes (pure).

Inputs are plain data read elsewhere: the trainer counts of the control plane
and the master's progress (JSON published in etcd). Keeping this pure keeps the monitor loop
thin and lets tests check the figures without a cluster.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from edl.local.status import RunSnapshot


def apply_progress(s: RunSnapshot, progress: Mapping[str, Any] | None) -> RunSnapshot:
    """Fold the master's progress JSON into the snapshot (fields it lacks stay as they were)."""
    if not progress:
        return s
    metrics = progress.get("metrics") or {}
    passes = _int(progress.get("passes"))
    pass_index = _int(progress.get("pass"))
    if passes is not None and pass_index is not None:
        pass_index = min(pass_index, max(passes - 1, 0))
    tasks_done = _int(progress.get("tasks_done"))
    if progress.get("finished") and progress.get("tasks_total") is not None:
        tasks_done = _int(progress.get("tasks_total"))
    return replace(
        s,
        pass_index=pass_index if pass_index is not None else s.pass_index,
        passes=passes if passes is not None else s.passes,
        tasks_done=tasks_done if tasks_done is not None else s.tasks_done,
        tasks_total=_int(progress.get("tasks_total"), s.tasks_total),
        tasks_failed=_int(progress.get("tasks_failed"), s.tasks_failed),
        redispatched=_int(progress.get("redispatches"), s.redispatched),
        loss=_float(progress.get("last_loss"), _float(metrics.get("loss"), s.loss)),
        samples_per_s=_float(progress.get("samples_per_s"), s.samples_per_s),
        accuracy=_float(metrics.get("accuracy"), s.accuracy),
    )


def apply_fit(s: RunSnapshot, curve: Any, points: Sequence[Any]) -> RunSnapshot:
    """The latest measured point and the fitted curve's prediction at that count ±1."""
    if not points:
        return s
    latest = points[-1]
    n = int(latest.trainers)
    predicted = None
    if curve is not None:
        predicted = [round(curve.rate(k), 2) for k in (n - 1, n, n + 1)]
    return replace(
        s,
        measured_trainers=n,
        measured_samples_per_s=round(float(latest.samples_per_s), 2),
        fitted_samples_per_s=predicted,
        fitted_curve=curve.describe() if curve is not None else None,
    )


def apply_trainers(
    s: RunSnapshot, running: int, desired: int, minimum: int, maximum: int
) -> RunSnapshot:
    return replace(
        s,
        trainers_running=running,
        trainers_desired=desired,
        trainers_min=minimum,
        trainers_max=maximum,
    )


def touch(s: RunSnapshot, state: str | None = None, message: str | None = None) -> RunSnapshot:
    """The snapshot as of now, optionally with a new state/message."""
    return replace(
        s,
        updated_at=time.time(),
        state=state if state is not None else s.state,
        message=message if message is not None else s.message,
    )


def _int(value: Any, default: int | None = None) -> int | None:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def _float(value: Any, default: float | None = None) -> float | None:
    try:
        return float(value) if value is not None else default
    except (TypeError, ValueError):
        return default
