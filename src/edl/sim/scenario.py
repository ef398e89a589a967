"""The scenario file: a cluster, its other workloads and a schedule of TrainingJobs.

A scenario is plain data, validated strictly so that a typo in a 200-line file is
named by its path (``training.jobs[2].trainer.min``) instead of silently ignored.
Expansion helpers (``expand_jobs``) turn compact job groups into one plan per job;
the runner never reads the YAML itself.
"""

from __future__ import annotations

import importlib.resources
import itertools
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

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


def _check_quantity(value: str | int | float) -> str:
    """Keep quantities as Kubernetes strings, but reject what the cluster could not parse."""
    from edl.api.quantity import QuantityError, parse_quantity

    text = str(value)
    try:
        number = parse_quantity(text)
    except QuantityError as error:
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from error
    if number < 0:
        raise ValueError(f"quantity must not be negative: {text!r}")
    return text


Quantity = Annotated[str | int | float, AfterValidator(_check_quantity)]
Seconds = Annotated[float, Field(ge=0)]


class Strict(BaseModel):
    """Base for every scenario section: unknown keys and type coercion are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Resources(Strict):
    """A resource list; ``gpu`` maps to ``nvidia.com/gpu``."""

    cpu: Quantity | None = None
    memory: Quantity | None = None
    gpu: Annotated[int, Field(ge=0)] = 0

    def to_resource_list(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.cpu is not None:
            out["cpu"] = str(self.cpu)
        if self.memory is not None:
            out["memory"] = str(self.memory)
        if self.gpu:
            out["nvidia.com/gpu"] = str(self.gpu)
        return out


class PodResources(Strict):
    """Requests and limits of one container; limits default to the requests."""

    requests: Resources
    limits: Resources | None = None

    def to_requirements(self) -> dict[str, dict[str, str]]:
        limits = self.limits if self.limits is not None else self.requests
        return {
            "requests": self.requests.to_resource_list(),
            "limits": limits.to_resource_list(),
        }


class NodeGroup(Strict):
    """``count`` identical nodes named ``<name>-<index>``."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    count: Annotated[int, Field(ge=1)]
    allocatable: Resources

    @model_validator(mode="after")
    def _needs_cpu_and_memory(self) -> NodeGroup:
        if self.allocatable.cpu is None or self.allocatable.memory is None:
            raise ValueError("allocatable needs both cpu and memory")
        return self


class BackgroundPods(Strict):
    """Pods that already run at t = 0 (system daemons, other tenants); they never change."""

    name: Annotated[str, Field(min_length=1)]
    namespace: str = "kube-system"
    per_node: bool = False
    count: Annotated[int, Field(ge=1)] | None = None
    resources: PodResources

    @model_validator(mode="after")
    def _count_or_per_node(self) -> BackgroundPods:
        if self.per_node == (self.count is not None):
            raise ValueError("give exactly one of per_node: true or count")
        return self


class Cluster(Strict):
    node_groups: Annotated[list[NodeGroup], Field(min_length=1)]
    background_pods: list[BackgroundPods] = []

    @model_validator(mode="after")
    def _unique_groups(self) -> Cluster:
        names = [group.name for group in self.node_groups]
        if len(names) != len(set(names)):
            raise ValueError("node group names must be unique")
        return self


class ReplicaStep(Strict):
    at: Seconds
    replicas: Annotated[int, Field(ge=0)]


class Workload(Strict):
    """Another tenant's Deployment whose replica count follows a schedule."""

    name: Annotated[str, Field(min_length=1)]
    namespace: str = "default"
    kind: Literal["Deployment"] = "Deployment"
    resources: PodResources
    schedule: Annotated[list[ReplicaStep], Field(min_length=1)]

    @model_validator(mode="after")
    def _ordered(self) -> Workload:
        times = [step.at for step in self.schedule]
        if any(later <= earlier for earlier, later in itertools.pairwise(times)):
            raise ValueError("schedule times must strictly increase")
        return self


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
    jobs: list[JobGroup] = []


class StartLatency(Strict):
    """Seconds from a pod's binding to phase Running: uniform in [min, max]."""

    min: Seconds = 1.0
    max: Seconds = 8.0

    @model_validator(mode="after")
    def _ordered(self) -> StartLatency:
        if self.max < self.min:
            raise ValueError("max is below min")
        return self


class Termination(Strict):
    """Seconds a deleted pod keeps running and holding its node's resources, per role."""

    trainer: Seconds = 2.0
    pserver: Seconds = 2.0
    master: Seconds = 2.0
    other: Seconds = 0.0


class Autoscaling(Strict):
    interval_s: Annotated[float, Field(gt=0)] = 5.0
    max_load_desired: Annotated[float, Field(gt=0, le=1)] = 0.97


class Window(Strict):
    start: Seconds
    end: Seconds

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.end <= self.start:
            raise ValueError("end must be after start")
        return self


class Measure(Strict):
    """Where the metrics look: utilisation until a time (the original: 550 s) and steady state."""

    utilization_until_s: Seconds = 550.0
    steady_state: Window


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
    workloads: list[Workload] = []
    training: Training = Training()

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
        workload_names = [(w.namespace, w.name) for w in self.workloads]
        if len(workload_names) != len(set(workload_names)):
            problems.append("workloads: names are not unique")
        if problems:
            raise ValueError("; ".join(problems))
        return self


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
        return int(self.group.spec["spec"]["trainer"]["max-instance"])  # type: ignore[index]

    @property
    def start_trainers(self) -> int | None:
        if self.group.trainer is not None:
            return self.group.trainer.start
        return self.group.start_trainers


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


def parse_scenario(data: Any, source: str = "scenario") -> Scenario:
    """Validate plain data; every problem is reported with its field path."""
    if not isinstance(data, dict):
        raise ScenarioError([("(top level)", "a scenario must be a mapping")], source)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as error:
        problems: list[tuple[str, str]] = []
        for item in error.errors():
            entry = (_path(item["loc"]), item["msg"].removeprefix("Value error, "))
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
