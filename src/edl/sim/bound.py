"""An upper bound on the steady-state CPU utilisation any policy could reach.

For every stretch of the steady window in which the set of present jobs and the
services' desired replicas stay constant, an integer program places the pods
that must run — every service replica, every present job's master and pservers
and its min-instance trainers — and as many trainers (up to max-instance) as fit,
maximising the CPU requested; the bound is the time-weighted mean, plus the
background pods. Whole pods on whole nodes (`sim.packing`): a node's room that no
pod of the scenario's shapes fits counts for nothing, so the bound is what the
pods could really pack, per node group (only where a group's shapes would make too
many per-node patterns are its smallest pods pooled over the group's room, a
relaxation that keeps it an upper bound). Requests within
max_load_desired of the cluster, as the policies keep them (unless the pods that
must run alone exceed it). `scipy.optimize.milp` (HiGHS) solves each stretch.

Constraints: a kind of pod is placed only on node groups whose taints its
tolerations admit and whose labels its nodeSelector and required node affinity
select (`accounting.eligibility`, as the planner reads them; trainers carry their
group's `scheduling`, masters and pservers none, services their own), and each
namespace quota bounds the pods it counts (`requests.cpu`, `requests.memory`,
`requests.nvidia.com/gpu`, `count/pods`/`pods`; a PriorityClass scope counts only
pods of those classes), so the bound is what pods could really reach.

Only compact-form jobs are modelled (a full TrainingJob manifest gives None).
"""

from __future__ import annotations

import itertools

from edl.accounting.eligibility import NodeFacts, PodConstraints, Taint, constraints_of
from edl.api.quantity import cpu_milli, memory_mega
from edl.api.role_requests import ROLE_REQUESTS
from edl.sim.packing import Kind, Limit, solve
from edl.sim.scenario import JobGroup, Scenario
from edl.sim.scheduling_spec import Scheduling
from edl.sim.sections import NodeGroup, PodResources

__all__ = ["steady_utilization_bound", "steady_utilization_bound_by_pool"]


def pod_shape(resources: PodResources) -> tuple[int, int, int]:
    r = resources.requests
    return (
        cpu_milli(str(r.cpu)) if r.cpu is not None else 0,
        memory_mega(str(r.memory)) if r.memory is not None else 0,
        r.gpu,
    )


def master_shape(resources: PodResources) -> tuple[int, int, int]:
    """A master pod's requests: the master's and its etcd sidecar's (which always asks
    its default)."""
    cpu, memory, gpu = pod_shape(resources)
    etcd = ROLE_REQUESTS["etcd"]
    return cpu + cpu_milli(etcd["cpu"]), memory + memory_mega(etcd["memory"]), gpu


def present_in(group: JobGroup, index: int, start: float, end: float) -> bool:
    """Job `index` of a group is present during the whole of [start, end)."""
    submit = group.submit_at + index * group.submit_every
    if submit > start:
        return False
    if group.delete_at is None:
        return True
    return group.delete_at + index * group.delete_every >= end


def breakpoints(scenario: Scenario, start: float, end: float) -> list[float]:
    times = {start, end}
    for workload in scenario.workloads:
        times.update(step.at for step in workload.schedule)
    for group in scenario.training.jobs:
        for i in range(group.count):
            times.add(group.submit_at + i * group.submit_every)
            if group.delete_at is not None:
                times.add(group.delete_at + i * group.delete_every)
    return sorted(t for t in times if start <= t <= end)


def replicas_at(scenario: Scenario, t: float) -> list[int]:
    out = []
    for workload in scenario.workloads:
        steps = [s.replicas for s in workload.schedule if s.at <= t]
        out.append(steps[-1] if steps else 0)
    return out


def allocatable_of(group: NodeGroup) -> tuple[int, int, int]:
    """A node group's allocatable (CPU milli, memory mega, GPUs) per node."""
    return (cpu_milli(str(group.allocatable.cpu or 0)),
            memory_mega(str(group.allocatable.memory or 0)), group.allocatable.gpu)


def group_facts(group: NodeGroup) -> NodeFacts:
    return NodeFacts(f"{group.name}-0", tuple(sorted(group.labels.items())),
                     tuple(Taint(t.key, t.value, t.effect) for t in group.taints))


def constraints_for(scheduling: Scheduling | None) -> PodConstraints:
    return constraints_of(scheduling.pod_fields() if scheduling is not None else {})


def quota_cost(key: str, shape: tuple[int, int, int]) -> int | None:
    """What one pod of `shape` costs a quota's `key` (None: a key the bound ignores)."""
    if key in ("pods", "count/pods"):
        return 1
    if key in ("cpu", "requests.cpu"):
        return shape[0]
    if key in ("memory", "requests.memory"):
        return shape[1]
    if key == "requests.nvidia.com/gpu":
        return shape[2]
    return None


def steady_utilization_bound(scenario: Scenario) -> float | None:
    """Best steady-window CPU utilisation (%) any plan and placement could reach."""
    return _bounds(scenario, per_pool=False)[0]


def steady_utilization_bound_by_pool(scenario: Scenario) -> dict[str, float] | None:
    """Per node group: the best steady-window CPU utilisation (%) of that group's nodes
    any plan and placement could reach (each group maximised on its own, so the figures
    need not be reachable together); None where `steady_utilization_bound` is."""
    return _bounds(scenario, per_pool=True)[1]


def _bounds(scenario: Scenario, per_pool: bool) -> tuple[float | None, dict[str, float] | None]:
    if any(group.trainer is None for group in scenario.training.jobs):
        return None, None
    window = scenario.measure.steady_state
    groups = scenario.cluster.node_groups
    alloc = [
        (
            cpu_milli(str(g.allocatable.cpu or 0)),
            memory_mega(str(g.allocatable.memory or 0)),
            g.allocatable.gpu,
        )
        for g in groups
    ]
    per_node = [0, 0, 0]
    counted = [0, 0, 0]  # background pods placed by count (spread: charged to the total)
    for pods in scenario.cluster.background_pods:
        shape = pod_shape(pods.resources)
        for d in range(3):
            if pods.per_node:
                per_node[d] += shape[d]
            else:
                counted[d] += shape[d] * (pods.count or 0)
    nodes = sum(g.count for g in groups)
    total_cpu = sum(g.count * a[0] for g, a in zip(groups, alloc, strict=True))
    background = per_node[0] * nodes + counted[0]
    counts = [g.count for g in groups]
    node_rooms = [(a[0] - per_node[0], a[1] - per_node[1], a[2] - per_node[2]) for a in alloc]
    points = breakpoints(scenario, window.start, window.end)
    weighted = 0.0
    pool_weighted = [0.0] * len(groups)
    for start, end in itertools.pairwise(points):
        if end <= start:
            continue
        # kinds: (shape, low, high); services and job overheads fixed, trainers ranged;
        # per kind its constraints, namespace and PriorityClass (for quotas)
        kinds: list[Kind] = []
        traits: list[tuple[PodConstraints, str, str | None]] = []
        for workload, replicas in zip(
            scenario.workloads, replicas_at(scenario, start), strict=True
        ):
            kinds.append((pod_shape(workload.resources), replicas, replicas))
            scheduling = workload.scheduling
            traits.append((constraints_for(scheduling), workload.namespace,
                           scheduling.priority_class if scheduling else None))
        for group in scenario.training.jobs:
            present = sum(present_in(group, i, start, end) for i in range(group.count))
            if not present:
                continue
            assert group.trainer is not None
            trainer = group.trainer
            kinds.append(
                (pod_shape(trainer.resources), present * trainer.min, present * trainer.max))
            scheduling = group.scheduling
            traits.append((constraints_for(scheduling), group.namespace,
                           scheduling.priority_class if scheduling else None))
            plain = (constraints_of({}), group.namespace, None)
            if group.pserver is not None:
                n = present * group.pserver.count
                kinds.append((pod_shape(group.pserver.resources), n, n))
                traits.append(plain)
            if group.master is not None:
                kinds.append((master_shape(group.master.resources), present, present))
                traits.append(plain)
        eligible = [[not c.blocker(group_facts(g)) for g in groups] for c, _, _ in traits]
        limits = quota_limits(scenario, kinds, traits)
        cap = scenario.autoscaler.max_load_desired * total_cpu - background
        if not per_pool:
            placed = solve(kinds, counts, node_rooms, cap, eligible, limits)
            weighted += (end - start) * (background + placed) / total_cpu
            continue
        for g, node_group in enumerate(groups):
            own = node_group.count * alloc[g][0]
            if own <= 0:
                continue
            placed = solve(kinds, counts, node_rooms, cap, eligible, limits, g)
            # background pods placed by count may all sit on this group (an upper bound)
            used = min(own, node_group.count * per_node[0] + counted[0] + placed)
            pool_weighted[g] += (end - start) * used / own
    span = points[-1] - points[0] if len(points) > 1 else 0.0
    if span <= 0:
        return None, None
    if not per_pool:
        return 100 * weighted / span, None
    return None, {g.name: 100 * w / span for g, w in zip(groups, pool_weighted, strict=True)}


def quota_limits(
    scenario: Scenario, kinds: list[Kind], traits: list[tuple[PodConstraints, str, str | None]]
) -> list[Limit]:
    """One limit per namespace quota and resource the bound models."""
    out = []
    for quota in scenario.quotas:
        for key, hard in sorted(quota.hard.items()):
            costs = []
            for (shape, _, _), (_, namespace, priority_class) in zip(kinds, traits, strict=True):
                cost = quota_cost(key, shape)
                counted = namespace == quota.namespace and (
                    quota.priority_classes is None or priority_class in quota.priority_classes)
                costs.append(cost if cost is not None and counted else 0)
            amount = quota_amount(key, str(hard))
            if amount is not None and any(costs):
                out.append((costs, amount))
    return out


def quota_amount(key: str, text: str) -> int | None:
    if key in ("cpu", "requests.cpu"):
        return cpu_milli(text)
    if key in ("memory", "requests.memory"):
        return memory_mega(text)
    if key in ("pods", "count/pods", "requests.nvidia.com/gpu"):
        return int(text)
    return None
