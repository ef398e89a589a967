"""A scenario job's work: how much it must do, how fast it runs, what a new trainer costs.

A job with ``work`` finishes in the simulator once its samples are done (`sim/work.py`);
one without it runs until deleted, as before. Throughput is samples/s as a function of
*contributing* trainers (running for at least ``join_cost_s``), given either by the
Universal Scalability Law parameters or by measured points (`edl.throughput.curve`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from edl.sim.sections import Seconds, Strict
from edl.throughput.curve import Curve, PointsCurve, UslCurve

PositiveFloat = Annotated[float, Field(gt=0)]


class ThroughputSpec(Strict):
    """``per_trainer`` (+ ``serial``, ``comm``) or ``points: {trainers: samples/s}``."""

    per_trainer: PositiveFloat | None = None
    serial: Annotated[float, Field(ge=0, le=1)] = 0.0
    comm: Annotated[float, Field(ge=0, le=1)] = 0.0
    points: dict[Annotated[int, Field(ge=1)], Annotated[float, Field(ge=0)]] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> ThroughputSpec:
        if (self.per_trainer is None) == (self.points is None):
            raise ValueError("give exactly one of per_trainer or points")
        if self.points is not None and (self.serial or self.comm):
            raise ValueError("serial/comm belong to the per_trainer form")
        if self.points is not None and not any(self.points.values()):
            raise ValueError("points: at least one throughput must be above 0")
        return self

    def curve(self) -> Curve:
        if self.points is not None:
            return PointsCurve(tuple(sorted((int(n), float(x)) for n, x in self.points.items())))
        assert self.per_trainer is not None
        return UslCurve(float(self.per_trainer), float(self.serial), float(self.comm))


class NoiseScaleSpec(Strict):
    """The job's gradient noise scale φ (samples): ``start`` at its first sample, ``end``
    at its last, linear in its progress in between."""

    start: PositiveFloat
    end: PositiveFloat


class PauseSpec(Strict):
    """Seconds one resize stops the whole job (the old world's last step to the new one's
    first, work redone included): uniform in [min, max], drawn per resize."""

    min: Seconds
    max: Seconds

    @model_validator(mode="after")
    def _ordered(self) -> PauseSpec:
        if self.max < self.min:
            raise ValueError("max is below min")
        return self


class Work(Strict):
    """``samples`` or ``passes`` x ``dataset_samples``; the true ``throughput``; the ``prior``
    the job declares to the autoscaler (none: it learns from measurements only).

    With ``noise_scale`` the work is counted in samples at ``initial_batch`` (the job's
    total batch at its start trainer count) and a larger batch is worth less per sample
    (`sim/noisy_work.py`); the job declares ``spec.batch`` (initial, ``max_batch``), so
    a policy may adapt its batch. Without it the batch plays no part, as before.

    With ``resize_pause_s`` every change of the contributing trainers stops the whole job
    for a drawn pause (a collective job's restart or live re-formation), which its master
    publishes; without it trainers join and leave without stopping the others."""

    samples: PositiveFloat | None = None
    passes: Annotated[int, Field(ge=1)] | None = None
    dataset_samples: PositiveFloat | None = None
    throughput: ThroughputSpec
    prior: ThroughputSpec | None = None
    join_cost_s: Seconds = 0.0
    noise: Annotated[float, Field(ge=0, le=0.5)] = 0.05
    publish_every_s: Annotated[float, Field(gt=0)] = 5.0
    cleanup_after_s: Seconds = 30.0
    initial_batch: Annotated[int, Field(ge=1)] | None = None
    max_batch: Annotated[int, Field(ge=1)] | None = None
    noise_scale: NoiseScaleSpec | None = None
    resize_pause_s: PauseSpec | None = None
    # when a chosen batch takes effect: "epoch", at a resize or epoch boundary; "task",
    # at the master's next publication (a parameter-server job's master hands the
    # per-trainer batch out with each task, `edl.runtime.master.batch`: no restart,
    # within seconds); "step", the same moment (a live collective job takes it at its
    # next step boundary, `edl.elastic`: no restart); "restart", only when the world
    # next re-forms for a resize or a failure (a torchrun job's workers read the batch
    # as a round starts, `collective.adaptive`; no restart is made for a batch)
    batch_change: Literal["epoch", "task", "step", "restart"] = "epoch"

    @model_validator(mode="after")
    def _amount(self) -> Work:
        per_pass = self.passes is not None or self.dataset_samples is not None
        if self.samples is None and not per_pass:
            raise ValueError("give samples, or passes and dataset_samples")
        if self.samples is not None and per_pass:
            raise ValueError("give either samples or passes and dataset_samples, not both")
        if per_pass and (self.passes is None or self.dataset_samples is None):
            raise ValueError("passes and dataset_samples go together")
        if (self.noise_scale is None) != (self.initial_batch is None):
            raise ValueError("noise_scale and initial_batch go together")
        if self.max_batch is not None and self.initial_batch is None:
            raise ValueError("max_batch needs initial_batch and noise_scale")
        if self.max_batch is not None and self.max_batch < (self.initial_batch or 0):
            raise ValueError(f"max_batch is below initial_batch ({self.initial_batch})")
        return self

    @property
    def epoch_samples(self) -> float:
        """Where a batch change may happen besides a resize: each pass over the data, or
        a tenth of the work when the work is not given in passes."""
        if self.dataset_samples is not None:
            return float(self.dataset_samples)
        return self.total_samples / 10

    @property
    def total_samples(self) -> float:
        if self.samples is not None:
            return float(self.samples)
        assert self.passes is not None and self.dataset_samples is not None
        return float(self.passes) * float(self.dataset_samples)
