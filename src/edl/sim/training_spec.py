"""The training part of a scenario: job groups, their trainers and the work they do."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from edl.sim.scheduling_spec import Scheduling
from edl.sim.sections import PodResources, Seconds, Strict
from edl.sim.work_spec import Work


class TrainerSpec(Strict):
    """Trainers of a compact job: elastic range, starting count and the count when static."""

    min: Annotated[int, Field(ge=1)]
    max: Annotated[int, Field(ge=1)]
    start: Annotated[int, Field(ge=1)] | None = None
    static: Annotated[int, Field(ge=1)] | None = None
    resources: PodResources

    @model_validator(mode="after")
    def _ordered(self) -> TrainerSpec:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        if self.start is not None and not self.min <= self.start <= self.max:
            raise ValueError(f"start ({self.start}) is outside [min, max]")
        return self


class PserverSpec(Strict):
    count: Annotated[int, Field(ge=1)]
    resources: PodResources


class MasterSpec(Strict):
    resources: PodResources


class JobGroup(Strict):
    """One job, or ``count`` identical jobs submitted ``submit_every`` seconds apart.

    Either the compact form (``trainer``, ``pserver``, ``master``) or ``spec``: a full
    TrainingJob manifest (its ``metadata.name`` is replaced by the group's name).
    """

    name: Annotated[str, Field(min_length=1)]
    namespace: str = "default"
    count: Annotated[int, Field(ge=1)] = 1
    submit_at: Seconds = 0.0
    submit_every: Seconds = 0.0
    delete_at: Seconds | None = None
    delete_every: Seconds = 0.0
    trainer: TrainerSpec | None = None
    pserver: PserverSpec | None = None
    master: MasterSpec | None = None
    spec: dict[str, Any] | None = None
    static_trainers: Annotated[int, Field(ge=1)] | None = None
    start_trainers: Annotated[int, Field(ge=1)] | None = None
    work: Work | None = None
    # where its trainers may run and their priority (the trainer pods' scheduling fields)
    scheduling: Scheduling | None = None
    # a Kueue LocalQueue in its namespace (the scenario's ``kueue`` section) and priority
    queue: str | None = None
    queue_priority_class: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> JobGroup:
        compact = (self.trainer, self.pserver, self.master)
        if self.spec is None and any(part is None for part in compact):
            raise ValueError("give trainer, pserver and master, or a full TrainingJob spec")
        if self.spec is not None and any(part is not None for part in compact):
            raise ValueError("give either spec or the compact trainer/pserver/master form")
        if self.spec is None and (self.static_trainers or self.start_trainers):
            raise ValueError("static_trainers/start_trainers belong to the spec form")
        if self.count > 1 and "{i}" not in self.name:
            raise ValueError("a group of several jobs needs '{i}' in its name")
        if self.delete_at is not None and self.delete_at < self.submit_at:
            raise ValueError("delete_at is before submit_at")
        return self


class Training(Strict):
    image: str = "edl/trainer:latest"
    jobs: list[JobGroup] = Field(default_factory=list)
