"""Scenario sections: the cluster, other workloads, timing and where metrics look.

Strict pydantic models (unknown keys and coercion are errors) shared by every part
of a scenario file; `edl.sim.scenario` assembles them.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Literal

from pydantic import Field, model_validator

from edl.sim.scheduling_spec import Scheduling, TaintSpec
from edl.sim.strict import Quantity, Seconds, Strict

__all__ = [
    "BackgroundPods", "Cluster", "NodeGroup", "PodResources", "Quantity", "Resources",
    "Scheduling", "Seconds", "Strict", "TaintSpec", "Workload",
]


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
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)

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
    background_pods: list[BackgroundPods] = Field(default_factory=list)

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
    scheduling: Scheduling | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Workload:
        times = [step.at for step in self.schedule]
        if any(later <= earlier for earlier, later in itertools.pairwise(times)):
            raise ValueError("schedule times must strictly increase")
        return self


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
