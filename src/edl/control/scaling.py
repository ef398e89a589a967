"""What the Autoscaler knows about each job's speed: online fits and resize history.

One `ScalingTracker` per Autoscaler. For every elastic job it keeps the declared
prior and join cost (TrainingJob annotations, `edl.throughput.annotations`), an
`OnlineFit` fed from a `ThroughputSource`, and when the Autoscaler last grew and
shrank the job and its smoothed resize pause (`edl.throughput.pause`), and turns
them into the `policy.Scaling` a throughput-aware policy reads. The history lives
in memory: a restarted controller starts with fresh cooldowns and refits from the
measurements the source still holds.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from dataclasses import dataclass, field

from edl.policy.base import Scaling
from edl.throughput.annotations import read_hints
from edl.throughput.batch import BatchLimits, at_declared_batch
from edl.throughput.board import ThroughputSource
from edl.throughput.curve import UslCurve
from edl.throughput.fit import Observation, OnlineFit
from edl.throughput.pause import PauseEstimate

log = logging.getLogger(__name__)

Key = tuple[str, str]
_LINEAR = UslCurve(1.0)  # what a policy assumes of a job it knows nothing of
_NOISE_WINDOW = 8  # φ is the mean of the newest measurements (each one is noisy)


@dataclass
class _Entry:
    fit: OnlineFit
    join_cost_s: float
    seen_until: float = float("-inf")
    grown_at: float | None = None
    shrunk_at: float | None = None
    warned: set[str] = field(default_factory=set)
    limits: BatchLimits | None = None  # spec.batch: the job adapts its batch
    noise: deque[float] = field(default_factory=lambda: deque(maxlen=_NOISE_WINDOW))
    compute: deque[float] = field(default_factory=lambda: deque(maxlen=_NOISE_WINDOW))
    pause: PauseEstimate = field(default_factory=PauseEstimate)


class ScalingTracker:
    def __init__(self, source: ThroughputSource | None = None) -> None:
        self.source = source
        self._jobs: dict[Key, _Entry] = {}

    def remember(
        self, key: Key, annotations: dict[str, str] | None, batch: BatchLimits | None = None
    ) -> None:
        prior, join, problems = read_hints(annotations)
        entry = self._jobs.get(key)
        if entry is None:
            entry = self._jobs[key] = _Entry(OnlineFit(prior), join)
        else:
            entry.fit.set_prior(prior)
            entry.join_cost_s = join
        entry.limits = batch
        for problem in problems:
            if problem not in entry.warned:
                entry.warned.add(problem)
                log.warning("%s/%s: ignoring annotation %s", *key, problem)

    def forget(self, key: Key) -> None:
        self._jobs.pop(key, None)

    def resized(self, key: Key, diff: int, now: float) -> None:
        entry = self._jobs.get(key)
        if entry is None or diff == 0:
            return
        if diff > 0:
            entry.grown_at = now
        else:
            entry.shrunk_at = now

    def pause(self, key: Key) -> PauseEstimate | None:
        """The job's smoothed resize pause (None: an unknown job)."""
        entry = self._jobs.get(key)
        return entry.pause if entry is not None else None

    def fit(self, key: Key) -> OnlineFit | None:
        entry = self._jobs.get(key)
        return entry.fit if entry is not None else None

    async def scaling(self, key: Key, now: float, batch: float | None = None) -> Scaling | None:
        """The job's `Scaling` now (None when neither a prior nor a measurement exists
        and the job was never resized; resized, it reads as linear, `_LINEAR`);
        ``batch``: the total batch the policy last chose for it (None: none chosen;
        the Scaling then carries the batch the job reports running at)."""
        entry = self._jobs.get(key)
        if entry is None:
            return None
        if self.source is not None:
            fresh = await self.source.job_throughput(*key, entry.seen_until)
            if fresh:
                for observation in fresh:
                    if observation.resize_pause_s is not None:
                        entry.pause.observe(observation.resize_pause_s, observation.resizes)
                entry.fit.extend(self._declared(entry, fresh))
                entry.seen_until = max(o.at for o in fresh)
        curve = entry.fit.curve()
        source = entry.fit.method
        if curve is None:
            if entry.grown_at is None and entry.shrunk_at is None:
                return None
            # Resized, yet nothing measured nor declared: the cooldowns must still hold
            # (without them such a job was grown and shrunk on alternate ticks), so it
            # is reported as the linear curve a policy assumes for it anyway.
            curve, source = _LINEAR, "none: linear assumed"
        latest = entry.fit.latest()
        pause = entry.pause
        return Scaling(
            curve=curve,
            source=source,
            join_cost_s=entry.join_cost_s,
            resize_pause_s=pause.value or 0.0,
            pause_source="" if pause.value is None else f"measured over {pause.folded} resizes",
            since_grow_s=None if entry.grown_at is None else now - entry.grown_at,
            since_shrink_s=None if entry.shrunk_at is None else now - entry.shrunk_at,
            remaining_samples=latest.remaining_samples if latest is not None else None,
            measured_samples_per_s=latest.samples_per_s if latest is not None else None,
            batch_limits=entry.limits,
            noise_scale=sum(entry.noise) / len(entry.noise) if entry.noise else None,
            # none chosen yet: the batch the job reports running at (`AdaptiveBatch`)
            batch=batch if batch is not None or latest is None else latest.batch,
            compute_rate=sum(entry.compute) / len(entry.compute) if entry.compute else None,
        )

    @staticmethod
    def _declared(entry: _Entry, fresh: list[Observation]) -> list[Observation]:
        """Measurements at a chosen batch, in the fit's unit (the declared per-trainer
        batch, through the compute rate measured with them); the φ and compute rate
        they carry join the job's windows (means of the newest few: each is noisy)."""
        limits = entry.limits
        if limits is None:
            return fresh
        out = []
        for observation in fresh:
            if observation.noise_scale is not None and observation.noise_scale > 0:
                entry.noise.append(observation.noise_scale)
            if observation.compute_rate is not None and observation.compute_rate > 0:
                entry.compute.append(observation.compute_rate)
            if observation.batch is not None:
                single = sum(entry.compute) / len(entry.compute) if entry.compute else None
                rate = at_declared_batch(
                    single, observation.trainers, observation.batch,
                    observation.samples_per_s, limits.base,
                )
                observation = dataclasses.replace(observation, samples_per_s=rate)
            out.append(observation)
        return out
