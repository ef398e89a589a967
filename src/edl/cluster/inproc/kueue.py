"""A model of Kueue for the in-process cluster: what edl relies on from it (pure).

Kueue's batch/job integration as edl sees it (docs/fidelity.md, one row each):

* **admission**: a Job labelled ``kueue.x-k8s.io/queue-name`` (a LocalQueue, which
  points at a ClusterQueue) is created suspended; its Workload asks for
  ``parallelism`` × its pod's requests. Pending Workloads are tried by priority
  (WorkloadPriorityClass value), then age; one that does not fit does not block the
  others (``BestEffortFIFO``, Kueue's default). Admission unsuspends the Job and puts the
  ResourceFlavor's node labels and tolerations into its pod template;
* **quota with borrowing**: a ClusterQueue may use its nominal quota plus what the
  other ClusterQueues of its cohort leave unused, at most its ``borrowingLimit``;
* **preemption**: with ``withinClusterQueue: LowerPriority``, a Workload that does not
  fit evicts admitted ones of lower priority in its ClusterQueue (lowest priority, then
  newest, first) until it fits; an evicted Job is suspended and its Workload requeued;
* a finished Job's Workload gives its quota back; a shrink of an admitted Job gives
  back the difference at once.

Not modelled: one ResourceFlavor per ClusterQueue (no flavor fungibility), no lending
limits, no fair sharing, no preemption across a cohort (``reclaimWithinCohort``), and
no Workload slices: a growth of an admitted Job is charged when it fits and otherwise
stays unadmitted, but its pods are not gated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edl.accounting import pod_request

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
RESOURCES = ("cpu", "memory")  # milli-CPU, MB


@dataclass(frozen=True)
class ResourceFlavor:
    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class ClusterQueue:
    """One flavor's nominal quota (milli-CPU, MB), its cohort and preemption rule."""

    name: str
    flavor: str
    nominal: Mapping[str, int]
    cohort: str = ""
    borrowing_limit: Mapping[str, int] | None = None  # None: as much as the cohort has
    preempt_lower_priority: bool = False


@dataclass
class Workload:
    """A queued Job as Kueue accounts for it."""

    namespace: str
    job: str
    cluster_queue: str
    priority: int
    created: float
    per_pod: Mapping[str, int]
    count: int
    admitted_count: int = 0  # 0: not admitted
    message: str = ""  # why it waits (Kueue's words), or why it was evicted

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.job

    def asks(self, count: int | None = None) -> dict[str, int]:
        n = self.count if count is None else count
        return {r: self.per_pod.get(r, 0) * n for r in RESOURCES}


def per_pod_request(job: Mapping[str, Any]) -> dict[str, int]:
    """One pod of a Job's template: its requests in the model's units."""
    template = (job.get("spec") or {}).get("template") or {}
    request = pod_request({"spec": template.get("spec") or {"containers": []}})
    return {"cpu": request.cpu_request_milli, "memory": request.memory_request_mega}


@dataclass
class Admission:
    """What one scheduling pass decided."""

    admitted: list[Workload] = field(default_factory=list)
    evicted: list[Workload] = field(default_factory=list)


class KueueModel:
    """ClusterQueues, LocalQueues and Workloads; `schedule()` admits and preempts."""

    def __init__(self) -> None:
        self.flavors: dict[str, ResourceFlavor] = {}
        self.cluster_queues: dict[str, ClusterQueue] = {}
        self.local_queues: dict[tuple[str, str], str] = {}  # (namespace, name) -> CQ
        self.priorities: dict[str, int] = {}
        self.workloads: dict[tuple[str, str], Workload] = {}

    # -- accounting -----------------------------------------------------------------------
    def used(self, cluster_queue: str) -> dict[str, int]:
        total = dict.fromkeys(RESOURCES, 0)
        for workload in self.workloads.values():
            if workload.cluster_queue == cluster_queue and workload.admitted_count:
                for resource, amount in workload.asks(workload.admitted_count).items():
                    total[resource] += amount
        return total

    def room(self, name: str) -> dict[str, int]:
        """What ClusterQueue ``name`` can still admit: in a cohort, what the cohort's
        nominal quotas leave unused (its own unused quota included, less what the others
        borrowed of it), at most up to its nominal quota plus its ``borrowingLimit``."""
        queue = self.cluster_queues[name]
        used = self.used(name)
        members = [q for q in self.cluster_queues.values()
                   if queue.cohort and q.cohort == queue.cohort] or [queue]
        room = {}
        for resource in RESOURCES:
            free = sum(q.nominal.get(resource, 0) - self.used(q.name)[resource]
                       for q in members)
            if queue.borrowing_limit is not None:
                ceiling = (queue.nominal.get(resource, 0)
                           + queue.borrowing_limit.get(resource, 0) - used[resource])
                free = min(free, ceiling)
            room[resource] = max(free, 0)
        return room

    def _shortfall(self, workload: Workload, count: int, room: Mapping[str, int]) -> str:
        """Kueue's pending message, or "" when ``count`` pods fit ``room``."""
        queue = self.cluster_queues[workload.cluster_queue]
        extra = max(count - workload.admitted_count, 0)
        for resource, amount in workload.asks(extra).items():
            if amount > room[resource]:
                unit = "m" if resource == "cpu" else "M"
                return (f"couldn't assign flavors to pod set main: insufficient unused quota "
                        f"for {resource} in flavor {queue.flavor}, "
                        f"{amount - room[resource]}{unit} more needed")
        return ""

    # -- scheduling -----------------------------------------------------------------------
    def schedule(self) -> Admission:
        """Admit what fits, by priority then age, preempting where allowed."""
        result = Admission()
        pending = sorted((w for w in self.workloads.values() if not w.admitted_count),
                         key=lambda w: (-w.priority, w.created))
        for workload in pending:
            if workload.cluster_queue not in self.cluster_queues:
                workload.message = f"ClusterQueue {workload.cluster_queue} doesn't exist"
                continue
            shortfall = self._shortfall(workload, workload.count,
                                        self.room(workload.cluster_queue))
            if shortfall:
                victims = self._victims(workload)
                if victims is None:
                    workload.message = shortfall
                    continue
                for victim in victims:
                    victim.admitted_count = 0
                    victim.message = (f"Preempted to accommodate a workload (job "
                                      f"{workload.job}) due to prioritization in the "
                                      "ClusterQueue")
                    result.evicted.append(victim)
            workload.admitted_count = workload.count
            workload.message = ""
            result.admitted.append(workload)
        return result

    def _victims(self, workload: Workload) -> list[Workload] | None:
        """The admitted lower-priority Workloads of its ClusterQueue whose eviction makes
        it fit (fewest, lowest priority and newest first); None if none would do."""
        queue = self.cluster_queues[workload.cluster_queue]
        if not queue.preempt_lower_priority:
            return None
        candidates = sorted((w for w in self.workloads.values()
                             if w.cluster_queue == queue.name and w.admitted_count
                             and w.priority < workload.priority),
                            key=lambda w: (w.priority, -w.created))
        chosen: list[Workload] = []
        room = self.room(queue.name)
        for victim in candidates:
            if not self._shortfall(workload, workload.count, room):
                break
            chosen.append(victim)
            for resource, amount in victim.asks(victim.admitted_count).items():
                room[resource] += amount
        if self._shortfall(workload, workload.count, room):
            return None
        return chosen

    def resize(self, key: tuple[str, str], count: int) -> bool:
        """An admitted Job's new parallelism: a shrink gives quota back at once; a growth
        is charged if it fits (True), else the admitted count stays (False)."""
        workload = self.workloads[key]
        workload.count = count
        if not workload.admitted_count or count <= workload.admitted_count:
            if workload.admitted_count:
                workload.admitted_count = count
            return True
        shortfall = self._shortfall(workload, count, self.room(workload.cluster_queue))
        if shortfall:
            workload.message = shortfall
            return False
        workload.admitted_count = count
        workload.message = ""
        return True

    def words(self, key: tuple[str, str]) -> str:
        """The Workload's state as `edl.accounting.kueue.workload_words` says it."""
        workload = self.workloads.get(key)
        if workload is None:
            return ""
        if workload.admitted_count:
            return (f"Kueue admitted workload {workload.job} to ClusterQueue "
                    f"{workload.cluster_queue}")
        if workload.message.startswith("Preempted"):
            return f"Kueue evicted workload {workload.job}: {workload.message}"
        return f"Kueue: {workload.message or f'workload {workload.job} pending'}"
