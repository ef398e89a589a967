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
    started = s.training_started_at
    if started is None and ((tasks_done or 0) > 0 or (pass_index or 0) > 0):
        started = time.time()
    return mark_start(s, replace(
        s,
        training_started_at=started,
        pass_index=pass_index if pass_index is not None else s.pass_index,
        passes=passes if passes is not None else s.passes,
        tasks_done=tasks_done if tasks_done is not None else s.tasks_done,
        tasks_total=_int(progress.get("tasks_total"), s.tasks_total),
        tasks_failed=_int(progress.get("tasks_failed"), s.tasks_failed),
        redispatched=_int(progress.get("redispatches"), s.redispatched),
        loss=_float(progress.get("last_loss"), _float(metrics.get("loss"), s.loss)),
        samples_per_s=_float(progress.get("samples_per_s"), s.samples_per_s),
        accuracy=_float(metrics.get("accuracy"), s.accuracy),
        # a job adapting its batch: its pservers' batch, φ and efficiency (the master sums them)
        batch=_float(progress.get("batch"), s.batch),
        noise_scale=_float(progress.get("noise_scale"), s.noise_scale),
        efficiency=_float(progress.get("efficiency"), s.efficiency),
        noise_unresolved=bool(progress.get("noise_unresolved", s.noise_unresolved))
        and progress.get("noise_scale") is None,
        trainer_batches=_batches(progress.get("trainer_batches"), s.trainer_batches),
    ))


def _batches(value: Any, default: dict[str, int]) -> dict[str, int]:
    """The master's tasks per per-trainer batch ({"64": 12}); anything else: ``default``."""
    if not isinstance(value, Mapping):
        return default
    out = {}
    for batch, tasks in value.items():
        if not (isinstance(batch, str) and batch.isdigit() and isinstance(tasks, int)
                and not isinstance(tasks, bool) and tasks >= 0):
            return default
        out[batch] = tasks
    return out


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


def run_state(
    ever_running: bool, running: int, desired: int, waiting: str, finished: int = 0
) -> tuple[str, str]:
    """(state, message) of a live run, consistent with the trainer counts shown beside it.

    A job that has trained stays Running while its trainers are replaced (the message
    says none runs); `waiting` is the first pod the scheduler cannot place, with why.
    ``finished``: trainers that exited 0 — once one has, no replacement comes (the
    trainer Job completes when the rest finish), so none running is no alarm.
    """
    if running:
        return "Running", f"waiting: {waiting}" if waiting else ""
    if finished:
        return "Running", "trainers finished"
    if ever_running:
        detail = f": {waiting}" if waiting else ", replacements starting"
        return "Running", f"no trainer running ({desired} desired){detail}"
    return "Starting", f"waiting: {waiting}" if waiting else "waiting for trainers to start"


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


def overall(s: RunSnapshot) -> tuple[int, int] | None:
    """(tasks done, tasks in all passes), or None before the dataset is known.

    A collective job counts epochs instead: (epochs finished, total), once the
    script reports both (``epoch=N epochs=M``).
    """
    if s.mode == "collective":
        return (min(s.epoch or 0, s.epochs), s.epochs) if s.epochs else None
    if not s.passes or not s.tasks_total:
        return None
    done = (s.pass_index or 0) * s.tasks_total + (s.tasks_done or 0)
    return min(done, s.passes * s.tasks_total), s.passes * s.tasks_total


def mark_start(before: RunSnapshot, after: RunSnapshot) -> RunSnapshot:
    """``after`` with the units done when its training start was first taken (pure)."""
    if before.training_started_at is not None or after.training_started_at is None:
        return after
    figures = overall(after)
    return replace(after, training_started_done=figures[0] if figures else 0)


def eta_s(s: RunSnapshot) -> float | None:
    """Seconds left at the rate since training was first seen under way: units done after
    that moment over the time since (None until one is: a first epoch's time includes
    every worker's start, and an ETA from it was minutes off)."""
    figures = overall(s)
    if figures is None or s.training_started_at is None or s.state != "Running":
        return None
    done, total = figures
    spent = s.updated_at - s.training_started_at
    since = done - s.training_started_done
    if since <= 0 or spent <= 0 or done <= 0:
        return None
    return spent * (total - done) / since
