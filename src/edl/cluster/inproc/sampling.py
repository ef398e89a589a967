"""What the simulator reads from the in-process cluster at one instant (plain frozen records)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TrainerCounts:
    """A TrainingJob's trainers at one instant (terminating ones apart)."""

    desired: int  # the trainer Job's spec.parallelism
    running: int
    pending: int
    terminating: int
    first_pod_at: float | None  # when the job's first pod of any role was created
    first_running_at: float | None  # when one of its trainers first reached Running


@dataclass(frozen=True, slots=True)
class ReplicaCounts:
    """A Deployment's or ReplicaSet's replicas at one instant."""

    desired: int
    running: int
    pending: int
    terminating: int


@dataclass(frozen=True, slots=True)
class ClusterSample:
    """What the simulator records at one instant; O(jobs + workloads) to build.

    Keys are object names (``namespace/name`` outside the default namespace).
    """

    time: float
    cpu_total_milli: int
    running_cpu_request_milli: int  # Σ CPU requests of pods in phase Running (terminating too)
    requested_cpu_milli: int  # Σ CPU requests of every non-terminal pod
    running_pods: int
    pending_pods: int
    unbound_pods: int
    trainers: dict[str, TrainerCounts]
    deployments: dict[str, ReplicaCounts]
    running_cpu_by_node: Mapping[str, int] = field(default_factory=dict)  # for pool metrics

    @property
    def utilization(self) -> float:
        """Running CPU requests / allocatable CPU, as the original measured it (0..1)."""
        if not self.cpu_total_milli:
            return 0.0
        return self.running_cpu_request_milli / self.cpu_total_milli
