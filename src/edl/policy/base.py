"""What every scaling policy takes and returns, and how to pick one by name.

A policy is a pure function: (elastic jobs, cluster resources, max load) ->
one Decision per job. The autoscaler and the simulator call it every tick, so
inputs are small frozen records and nothing is copied that is not changed.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from edl.accounting.eligibility import NO_CONSTRAINTS, PodConstraints
from edl.accounting.types import ClusterResource, PodResources
from edl.throughput.batch import BatchLimits
from edl.throughput.curve import Curve

__all__ = [
    "POLICIES",
    "Decision",
    "JobView",
    "Policy",
    "Scaling",
    "Trainer",
    "UnknownPolicyError",
    "get_policy",
]


@dataclass(frozen=True, slots=True)
class Scaling:
    """What a job's speed is known to be, for throughput-aware policies (`goodput`).

    `curve`: samples/s against contributing trainers (fitted online, or the declared
    prior); `source` says which ("prior", "prior scaled to N measurements", "fit of
    N counts"). `join_cost_s`: seconds before a new trainer contributes.
    `resize_pause_s`: seconds the whole job stops for one resize (a collective job's
    restart or live re-formation; 0 for parameter-server jobs, whose trainers come and
    go without stopping the others, until one is measured); `pause_source` says where
    it came from ("": nothing known, "measured over N resizes": the runtime's smoothed
    measurement, `edl.throughput.pause`; else the collective mode's default).
    `since_grow_s` / `since_shrink_s`: seconds since the autoscaler last grew / shrank
    the job (None: never). `remaining_samples`: work left, when the job reports it.
    """

    curve: Curve
    source: str = "prior"
    join_cost_s: float = 0.0
    resize_pause_s: float = 0.0
    pause_source: str = ""
    since_grow_s: float | None = None
    since_shrink_s: float | None = None
    remaining_samples: float | None = None
    measured_samples_per_s: float | None = None
    batch_limits: BatchLimits | None = None
    noise_scale: float | None = None
    batch: float | None = None
    compute_rate: float | None = None


class Trainer(NamedTuple):
    """One trainer pod of a job: its name, its node ("" = not bound yet), and whether
    it is already being deleted (it still holds its node's room until it exits)."""

    name: str
    node: str
    leaving: bool = False


@dataclass(frozen=True, slots=True)
class JobView:
    """One elastic TrainingJob as a policy sees it.

    Resources are per trainer pod (CPU milli, memory mega, GPU count).
    `parallelism` is the trainer Job's current `spec.parallelism`; `total`,
    `running` and `pending` count its non-terminal trainer pods (terminating pods
    are still Running, as Kubernetes reports them). `unscheduled` counts the pending
    ones without `spec.nodeName` (their room is not yet taken from any node); None
    when the caller does not know, and policies then assume every pending pod is
    unscheduled (safe: it can only make them more careful).

    `trainers`: where each trainer pod runs (leaving ones included, flagged), so a
    policy can reason per node and name the exact pods to remove; None when the
    caller cannot tell (then a policy cannot free room on a chosen node).
    """

    namespace: str
    name: str
    min_instance: int
    max_instance: int
    parallelism: int
    cpu_request_milli: int = 0
    cpu_limit_milli: int = 0
    memory_request_mega: int = 0
    memory_limit_mega: int = 0
    gpu_request: int = 0
    gpu_limit: int = 0
    total: int = 0
    running: int = 0
    pending: int = 0
    unscheduled: int | None = None
    trainers: tuple[Trainer, ...] | None = None
    scaling: Scaling | None = None
    # every other resource one trainer requests (extended resources...): (name, amount)
    extended: tuple[tuple[str, int], ...] = ()
    # where a trainer pod may land (its tolerations, nodeSelector, required affinity)
    constraints: PodConstraints = NO_CONSTRAINTS
    # what namespace quotas read of a trainer pod (scopes)
    priority_class: str = ""
    terminating: bool = False

    @classmethod
    def from_pod_resources(
        cls,
        namespace: str,
        name: str,
        *,
        min_instance: int,
        max_instance: int,
        parallelism: int,
        per_pod: PodResources,
        total: int,
        running: int,
        pending: int,
        unscheduled: int | None,
        trainers: tuple[Trainer, ...] | None = None,
        scaling: Scaling | None = None,
        constraints: PodConstraints = NO_CONSTRAINTS,
        priority_class: str = "",
        terminating: bool = False,
    ) -> JobView:
        """A view from one trainer pod's resources (`edl.accounting.pod_request`) and counts.

        Why here: the Autoscaler (live cluster) and `edl plan` (a snapshot) both build
        views this way; one place keeps the field mapping from drifting apart.
        """
        return cls(
            namespace=namespace,
            name=name,
            min_instance=min_instance,
            max_instance=max_instance,
            parallelism=parallelism,
            cpu_request_milli=per_pod.cpu_request_milli,
            cpu_limit_milli=per_pod.cpu_limit_milli,
            memory_request_mega=per_pod.memory_request_mega,
            memory_limit_mega=per_pod.memory_limit_mega,
            gpu_request=per_pod.gpu_request,
            gpu_limit=per_pod.gpu_limit,
            total=total,
            running=running,
            pending=pending,
            unscheduled=unscheduled,
            trainers=trainers,
            scaling=scaling,
            extended=per_pod.extended,
            constraints=constraints,
            priority_class=priority_class,
            terminating=terminating,
        )

    @property
    def per_pod(self) -> PodResources:
        """One trainer's requests and limits, as `pod_request` gives them."""
        return PodResources(
            self.cpu_request_milli, self.cpu_limit_milli, self.memory_request_mega,
            self.memory_limit_mega, self.gpu_request, self.gpu_limit, self.extended,
        )

    @property
    def unbound(self) -> int:
        """Pending trainer pods not yet bound to a node (all pending ones when unknown)."""
        return self.pending if self.unscheduled is None else self.unscheduled

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name): unique per job, used to break ties deterministically."""
        return (self.namespace, self.name)

    @property
    def elastic(self) -> bool:
        """Whether a plan may choose its size (min-instance < max-instance)."""
        return self.min_instance < self.max_instance

    def clamped(self) -> int:
        """The parallelism moved into [min, max]: what any plan starts from, and the whole
        plan of a fixed-size job (an edit of its size reaches the Job only this way)."""
        return min(max(self.parallelism, self.min_instance), self.max_instance)

    def fixed_reason(self) -> str:
        """Why a fixed-size job (min-instance = max-instance) gets `clamped()`."""
        size = self.clamped()
        if size == self.parallelism:
            return f"keep {size}: not elastic (min-instance = max-instance)"
        verb = "grow" if size > self.parallelism else "shrink"
        return f"{verb} {self.parallelism}->{size}: fixed size (min-instance = max-instance)"

    def fulfillment(self, instances: int | None = None) -> float:
        """(instances - min) / (max - min), 1 when min == max (the original's definition)."""
        if self.max_instance == self.min_instance:
            return 1.0
        current = self.parallelism if instances is None else instances
        return (current - self.min_instance) / (self.max_instance - self.min_instance)


@dataclass(frozen=True, slots=True)
class Decision:
    """The plan for one job: its trainer Job's parallelism now and the target, with why.

    `victim_nodes`: on a shrink, the nodes to take the leaving trainers from, best
    first (empty = let the cluster choose, as Kubernetes' Job controller does:
    newest pod first). A cluster that can delete named pods uses it to free room
    where it can be used again instead of leaving holes too small for any pod.
    `victims`: on a shrink, the exact trainer pods to remove (a policy that knows
    placement picks them like the scheduler's preemption); `placement`: on a growth,
    the node the plan gave each of the ``target - parallelism`` trainers the Job will
    create (the Autoscaler makes them the trainers' preferred nodes, `edl.control.placement`).
    `batch`: for a job that adapts its batch, the total batch the policy chose (the
    Autoscaler writes it on the trainer Job; a torchrun job takes it when its world next
    re-forms, a live or parameter-server job at its next step or task); None leaves it.
    """

    namespace: str
    name: str
    parallelism: int
    target: int
    reason: str
    victim_nodes: tuple[str, ...] = ()
    victims: tuple[str, ...] = ()
    placement: tuple[str, ...] = ()
    batch: int | None = None  # a job with spec.batch: the total batch to run at

    @property
    def diff(self) -> int:
        return self.target - self.parallelism

    def to_dict(self) -> dict[str, object]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "parallelism": self.parallelism,
            "target": self.target,
            "reason": self.reason,
        }


class Policy(Protocol):
    """A scaling policy. Must be pure and deterministic: same input, same plan."""

    name: str

    def plan(
        self, jobs: Sequence[JobView], resources: ClusterResource, max_load_desired: float
    ) -> list[Decision]:
        """One Decision per job, in the order of `jobs`."""
        ...


# name -> "module:attribute"; a new policy is a new module and one line here.
POLICIES: dict[str, str] = {
    "default": "edl.policy.default:DefaultPolicy",
    "reference": "edl.policy.reference:ReferencePolicy",
    "goodput": "edl.policy.goodput:GoodputPolicy",
}


class UnknownPolicyError(ValueError):
    """A policy name that is not in POLICIES."""


def get_policy(name: str) -> Policy:
    """A policy instance by name (`default`, `reference`, `goodput`)."""
    target = POLICIES.get(name)
    if target is None:
        raise UnknownPolicyError(
            f"unknown policy {name!r} (choose one of: {', '.join(sorted(POLICIES))})"
        )
    module_name, attr = target.split(":")
    return getattr(importlib.import_module(module_name), attr)()
