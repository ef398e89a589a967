"""The plain data the autoscaler reasons about: what a pod asks for, what the cluster has.

Integer units as the original used them: CPU in milli-cores, memory in "mega"
(10^6 bytes, rounded up), GPUs as a count. Frozen dataclasses with slots keep
them cheap to build and safe to share; the per-node maps inside `Nodes` are
plain dicts that policies copy before changing (never mutate a caller's dict).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from edl.accounting.eligibility import NO_CONSTRAINTS, NodeFacts, PodConstraints

__all__ = ["ClusterResource", "Nodes", "PodResources", "QuotaRoom"]


@dataclass(frozen=True, slots=True)
class PodResources:
    """Effective requests and limits of one pod (see `edl.accounting.pod_request`)."""

    cpu_request_milli: int = 0
    cpu_limit_milli: int = 0
    memory_request_mega: int = 0
    memory_limit_mega: int = 0
    gpu_request: int = 0
    gpu_limit: int = 0
    # every other resource requested (extended ones, ephemeral-storage, hugepages-*):
    # (name, amount rounded up), sorted by name
    extended: tuple[tuple[str, int], ...] = ()
    # what only a pod that waits for room needs (a pending pod: the policy places it)
    constraints: PodConstraints = NO_CONSTRAINTS
    priority: int = 0  # spec.priority (from its PriorityClass)


@dataclass(frozen=True, slots=True)
class Nodes:
    """Room left on each node, by node name: the original's `Nodes` plus free GPUs.

    Room = allocatable minus the requests of the non-terminal pods bound to the node.
    A value can be negative when a node is over-committed (e.g. allocatable shrank).
    """

    cpu_idle_milli: dict[str, int] = field(default_factory=dict)
    memory_free_mega: dict[str, int] = field(default_factory=dict)
    gpu_free: dict[str, int] = field(default_factory=dict)
    # per node: what is free of every other resource it offers, `pods` included
    extended_free: dict[str, dict[str, int]] = field(default_factory=dict)
    # per node: its name, labels and taints (absent: no labels, no taints)
    facts: dict[str, NodeFacts] = field(default_factory=dict)

    def __str__(self) -> str:
        """One line per node, sorted: `node-1: cpu idle 1500m, memory free 2048M, gpu free 0`."""
        lines = [
            f"{name}: cpu idle {self.cpu_idle_milli[name]}m, "
            f"memory free {self.memory_free_mega.get(name, 0)}M, "
            f"gpu free {self.gpu_free.get(name, 0)}"
            for name in sorted(self.cpu_idle_milli)
        ]
        return "\n".join(lines) if lines else "(no nodes)"

    def __len__(self) -> int:
        return len(self.cpu_idle_milli)


@dataclass(frozen=True, slots=True)
class ClusterResource:
    """Totals and requests of the whole cluster, as the original's `ClusterResource`.

    Requests and limits sum every non-terminal pod (Pending, Running, terminating),
    bound to a node or not, so pending pods push the aggregate load up (the
    original relied on that to trigger scale-down).

    edl extension: `pending` lists the pods that are not trainers and are not yet
    bound to a node (a service scaling up, a new job's pserver); a policy can make
    room for them. Sorted by (namespace, name) for deterministic plans.
    """

    node_count: int = 0
    gpu_request: int = 0
    gpu_limit: int = 0
    gpu_total: int = 0
    cpu_request_milli: int = 0
    cpu_limit_milli: int = 0
    cpu_total_milli: int = 0
    memory_request_mega: int = 0
    memory_limit_mega: int = 0
    memory_total_mega: int = 0
    nodes: Nodes = field(default_factory=Nodes)
    pending: tuple[PodResources, ...] = ()
    quotas: tuple[QuotaRoom, ...] = ()


@dataclass(frozen=True, slots=True)
class QuotaRoom:
    """One ResourceQuota: its namespace, what it caps (`hard`) and what is `used`.

    Keys as Kubernetes writes them (`requests.cpu`, `cpu`, `limits.memory`,
    `requests.nvidia.com/gpu`, `pods`, `count/pods`); amounts in edl's units (CPU
    milli, memory mega, everything else rounded up). `scopes` and `selector` (the
    `scopeSelector` expressions: (scopeName, operator, values)) say which pods it counts.
    """

    namespace: str
    name: str
    hard: Mapping[str, int]
    used: Mapping[str, int]
    scopes: tuple[str, ...] = ()
    selector: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
