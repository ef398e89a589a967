"""The scenario file: a cluster, its other workloads and a schedule of TrainingJobs.

A scenario is plain data, validated strictly so that a typo in a 200-line file is
named by its path (``training.jobs[2].trainer.min``) instead of silently ignored.
Expansion helpers (``expand_jobs``) turn compact job groups into one plan per job;
the runner never reads the YAML itself.
"""

from __future__ import annotations

import difflib
import importlib.resources
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from edl.sim.kueue_spec import KueueSpec
from edl.sim.scheduling_spec import PriorityClassSpec, QuotaSpec
from edl.sim.sections import (
    Autoscaling,
    Cluster,
    Measure,
    StartLatency,
    Strict,
    Termination,
    Workload,
)
from edl.sim.training_spec import JobGroup, Training
from edl.sim.work_spec import Work

__all__ = [
    "JobGroup",
    "JobPlan",
    "Scenario",
    "ScenarioError",
    "Work",
    "Workload",
    "expand_jobs",
    "load_scenario",
    "parse_scenario",
    "shipped_scenarios",
]

from edl.api.errors import plain_message
from edl.api.yamlload import safe_load

SHIPPED_PACKAGE = "edl.scenarios"
MAX_JOB_NAME = 52  # leaves room for "-trainer" / "-pserver" and a pod suffix in 63
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class ScenarioError(ValueError):
    """A scenario that cannot be used; ``problems`` lists (field path, message)."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "scenario") -> None:
        self.problems = problems
        self.source = source
        listed = "; ".join(f"{path}: {message}" for path, message in problems)
        super().__init__(f"{source}: {listed}")


class Scenario(Strict):
    name: Annotated[str, Field(min_length=1)]
    description: str = ""
    duration_s: Annotated[float, Field(gt=0)]
    sample_interval_s: Annotated[float, Field(gt=0)] = 1.0
    seed: int = 0
    placement: Literal["spread", "binpack"] = "spread"
    autoscaler: Autoscaling = Autoscaling()
    pod_start_latency_s: StartLatency = StartLatency()
    termination_s: Termination = Termination()
    measure: Measure
    cluster: Cluster
    workloads: list[Workload] = Field(default_factory=list)
    training: Training = Training()
    priority_classes: list[PriorityClassSpec] = Field(default_factory=list)
    quotas: list[QuotaSpec] = Field(default_factory=list)
    kueue: KueueSpec | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        problems = []
        if self.measure.steady_state.end > self.duration_s:
            problems.append("measure.steady_state.end is after duration_s")
        names = [job.name for job in expand_jobs(self)]
        if len(names) != len(set(names)):
            problems.append("training.jobs: job names are not unique")
        bad = [name for name in names if not _DNS_LABEL.match(name) or len(name) > MAX_JOB_NAME]
        if bad:
            problems.append(
                f"training.jobs: {bad[0]!r} is not a DNS label of at most {MAX_JOB_NAME} "
                "characters (lower-case letters, digits, '-')"
            )
        classes = {c.name for c in self.priority_classes}
        wanted = [g.scheduling.priority_class for g in self.training.jobs if g.scheduling] + [
            w.scheduling.priority_class for w in self.workloads if w.scheduling]
        unknown = sorted({name for name in wanted if name and name not in classes})
        if unknown:
            problems.append(f"priority class {unknown[0]!r} is not in priority_classes")
        if len(classes) != len(self.priority_classes):
            problems.append("priority_classes: names are not unique")
        workload_names = [(w.namespace, w.name) for w in self.workloads]
        if len(workload_names) != len(set(workload_names)):
            problems.append("workloads: names are not unique")
        problems += _kueue_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def _kueue_problems(scenario: Scenario) -> list[str]:
    """Job groups naming a LocalQueue or WorkloadPriorityClass the scenario lacks."""
    kueue = scenario.kueue
    locals_ = {(q.namespace, q.name) for q in kueue.local_queues} if kueue else set()
    classes = {c.name for c in kueue.priority_classes} if kueue else set()
    problems = []
    for group in scenario.training.jobs:
        if group.queue and (group.namespace, group.queue) not in locals_:
            problems.append(f"training.jobs {group.name}: LocalQueue {group.queue!r} is not "
                            f"in kueue.local_queues (namespace {group.namespace})")
        if group.queue_priority_class and group.queue_priority_class not in classes:
            problems.append(f"training.jobs {group.name}: WorkloadPriorityClass "
                            f"{group.queue_priority_class!r} is not in kueue.priority_classes")
    return problems


class JobPlan(BaseModel):
    """One TrainingJob of the scenario, expanded from its group."""

    model_config = ConfigDict(frozen=True)

    name: str
    namespace: str
    submit_at: float
    delete_at: float | None
    group: JobGroup

    @property
    def static_trainers(self) -> int:
        if self.group.trainer is not None:
            trainer = self.group.trainer
            return trainer.static if trainer.static is not None else trainer.max
        if self.group.static_trainers is not None:
            return self.group.static_trainers
        # a group without trainer sizes has its validated TrainingJob manifest in `spec`
        return int(self.group.spec["spec"]["trainer"]["max-instance"])  # type: ignore[index]

    @property
    def start_trainers(self) -> int | None:
        if self.group.trainer is not None:
            return self.group.trainer.start
        return self.group.start_trainers

    @property
    def work(self) -> Work | None:
        """What the job must do before it succeeds (None: it runs until deleted)."""
        return self.group.work


def expand_jobs(scenario: Scenario) -> list[JobPlan]:
    """Every job of the scenario, in submission order (stable for equal times)."""
    plans: list[JobPlan] = []
    for group in scenario.training.jobs:
        for index in range(group.count):
            delete_at = (
                None if group.delete_at is None else group.delete_at + index * group.delete_every
            )
            plans.append(
                JobPlan(
                    name=group.name.replace("{i}", str(index + 1)),
                    namespace=group.namespace,
                    submit_at=group.submit_at + index * group.submit_every,
                    delete_at=delete_at,
                    group=group,
                )
            )
    return sorted(plans, key=lambda plan: plan.submit_at)


def _path(location: tuple[int | str, ...]) -> str:
    out = ""
    for part in location:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-", "constrained-", "str", "int", "float")):
            continue  # union branch tags from pydantic, not part of the user's path
        else:
            out += f".{part}" if out else part
    return out or "(top level)"


def _field_names() -> list[str]:
    """Every field name a scenario section has (for 'did you mean')."""
    names: set[str] = set()
    pending: list[type[BaseModel]] = [Scenario]
    seen: set[type[BaseModel]] = set()
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, info in model.model_fields.items():
            names.add(info.alias or name)
            pending += [t for t in _models_in(info.annotation)]
    return sorted(names)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside a field's annotation (lists, unions, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def parse_scenario(data: Any, source: str = "scenario") -> Scenario:
    """Validate plain data; every problem is reported with its field path."""
    if not isinstance(data, dict):
        raise ScenarioError([("(top level)", "a scenario must be a mapping")], source)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as error:
        problems: list[tuple[str, str]] = []
        for item in error.errors(include_url=False):
            message = plain_message(item)
            loc = item["loc"]
            if item["type"] == "extra_forbidden" and loc and isinstance(loc[-1], str):
                close = difflib.get_close_matches(loc[-1], _field_names(), n=1, cutoff=0.75)
                message += f" (did you mean {close[0]!r}?)" if close else ""
            entry = (_path(loc), message)
            if entry not in problems:
                problems.append(entry)
        raise ScenarioError(problems, source) from None
    spec_problems = _full_spec_problems(scenario)
    if spec_problems:
        raise ScenarioError(spec_problems, source)
    return scenario


def _full_spec_problems(scenario: Scenario) -> list[tuple[str, str]]:
    """Check jobs given as full TrainingJob manifests as the Controller will: JobParser.validate."""
    from edl.api.errors import JobValidationError
    from edl.jobparser import JobParser

    parser = JobParser()
    problems: list[tuple[str, str]] = []
    for index, group in enumerate(scenario.training.jobs):
        if group.spec is None:
            continue
        prefix = f"training.jobs[{index}].spec"
        manifest = dict(group.spec)
        manifest["metadata"] = {**(manifest.get("metadata") or {}), "name": "scenario-check"}
        try:
            job = parser.validate(manifest)
        except JobValidationError as error:
            problems += [
                (f"{prefix}.{path}" if path else prefix, msg) for path, msg in error.problems
            ]
            continue
        if group.static_trainers is None and job.spec.trainer.max_instance is None:
            problems.append((f"{prefix}.spec.trainer.max-instance", "needed (or static_trainers)"))
    return problems


def shipped_scenarios() -> list[str]:
    """Names of the scenarios that ship with edl (``case1``, ``case2``...)."""
    root = importlib.resources.files(SHIPPED_PACKAGE)
    return sorted(
        entry.name.removesuffix(".yaml")
        for entry in root.iterdir()
        if entry.name.endswith(".yaml")
    )


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a scenario file, or a shipped scenario by name."""
    path = Path(name_or_path)
    if path.is_dir():
        raise ScenarioError([("(file)", "is a directory, not a scenario file")], str(path))
    if path.exists():  # a regular file, or a pipe such as /dev/stdin
        try:
            text, source = path.read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            raise ScenarioError([("(file)", f"cannot read: {reason}")], str(path)) from None
    elif str(name_or_path) in shipped_scenarios():
        resource = importlib.resources.files(SHIPPED_PACKAGE) / f"{name_or_path}.yaml"
        text, source = resource.read_text(encoding="utf-8"), str(name_or_path)
    else:
        known = ", ".join(shipped_scenarios())
        raise ScenarioError(
            [("(file)", f"no such file or shipped scenario (shipped: {known})")],
            str(name_or_path),
        )
    try:
        data = safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "cannot parse"
        raise ScenarioError([("(file)", f"not valid YAML{where}: {problem}")], source) from None
    return parse_scenario(data, source)
