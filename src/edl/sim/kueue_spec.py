"""The ``kueue`` section of a scenario: a cluster run by Kueue (ResourceFlavors,
ClusterQueues with cohorts, borrowing limits and preemption, LocalQueues and
WorkloadPriorityClasses), simulated by the in-process model (`edl.cluster.inproc.kueue`;
what it leaves out: docs/fidelity.md). A job group joins a LocalQueue with ``queue``."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from edl.api.quantity import cpu_milli, memory_mega
from edl.cluster.inproc.kueue import ClusterQueue, ResourceFlavor
from edl.sim.strict import Quantity, Strict


class FlavorSpec(Strict):
    name: Annotated[str, Field(min_length=1)]
    node_labels: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)

    def model(self) -> ResourceFlavor:
        return ResourceFlavor(self.name, dict(self.node_labels),
                              tuple(dict(t) for t in self.tolerations))


def _amounts(resources: dict[str, Quantity]) -> dict[str, int]:
    return {"cpu": cpu_milli(resources.get("cpu", 0)),
            "memory": memory_mega(resources.get("memory", 0))}


class ClusterQueueSpec(Strict):
    """One flavor's ``nominal`` quota (cpu, memory), optionally in a ``cohort`` with a
    ``borrowing_limit``, preempting lower priorities within itself if asked."""

    name: Annotated[str, Field(min_length=1)]
    flavor: str
    nominal: dict[str, Quantity]
    cohort: str = ""
    borrowing_limit: dict[str, Quantity] | None = None
    preempt_lower_priority: bool = False

    def model(self) -> ClusterQueue:
        limit = None if self.borrowing_limit is None else _amounts(self.borrowing_limit)
        return ClusterQueue(self.name, self.flavor, _amounts(self.nominal), self.cohort, limit,
                            self.preempt_lower_priority)


class LocalQueueSpec(Strict):
    name: Annotated[str, Field(min_length=1)]
    namespace: str = "default"
    cluster_queue: str


class WorkloadPriorityClassSpec(Strict):
    name: Annotated[str, Field(min_length=1)]
    value: int


class KueueSpec(Strict):
    flavors: list[FlavorSpec]
    cluster_queues: list[ClusterQueueSpec]
    local_queues: list[LocalQueueSpec]
    priority_classes: list[WorkloadPriorityClassSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _refers(self) -> KueueSpec:
        flavors = {f.name for f in self.flavors}
        queues = {q.name for q in self.cluster_queues}
        for queue in self.cluster_queues:
            if queue.flavor not in flavors:
                raise ValueError(f"ClusterQueue {queue.name}: flavor {queue.flavor!r} is not "
                                 "in kueue.flavors")
        for local in self.local_queues:
            if local.cluster_queue not in queues:
                raise ValueError(f"LocalQueue {local.name}: ClusterQueue "
                                 f"{local.cluster_queue!r} is not in kueue.cluster_queues")
        return self

    def apply(self, cluster: Any) -> None:
        """Create every object on an `InProcessCluster` (its Kueue turned on)."""
        for flavor in self.flavors:
            cluster.create_resource_flavor(flavor.model())
        for klass in self.priority_classes:
            cluster.create_workload_priority_class(klass.name, klass.value)
        for queue in self.cluster_queues:
            cluster.create_cluster_queue(queue.model())
        for local in self.local_queues:
            cluster.create_local_queue(local.namespace, local.name, local.cluster_queue)
