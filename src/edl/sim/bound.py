"""An upper bound on the steady-state CPU utilisation any policy could reach.

For every stretch of the steady window in which the set of present jobs and the
services' desired replicas stay constant, an integer program places the pods
that must run — every service replica, every present job's master and pservers
and its min-instance trainers — and as many trainers (up to max-instance) as fit,
maximising the CPU requested; the bound is the time-weighted mean, plus the
background pods. Per node group, pods larger than an eighth of a node (or with a
GPU) are packed exactly, by per-node patterns; smaller pods are poured into the
room the patterns leave, pooled over the group's nodes (a relaxation: how they
split between nodes is not checked), which keeps it an upper bound — no real
placement can beat it — and exact when no pod is small. Requests within
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
from collections.abc import Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from edl.accounting.eligibility import NodeFacts, PodConstraints, Taint, constraints_of
from edl.api.quantity import cpu_milli, memory_mega
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


def _present(group: JobGroup, index: int, start: float, end: float) -> bool:
    """Job `index` of a group is present during the whole of [start, end)."""
    submit = group.submit_at + index * group.submit_every
    if submit > start:
        return False
    if group.delete_at is None:
        return True
    return group.delete_at + index * group.delete_every >= end


def _breakpoints(scenario: Scenario, start: float, end: float) -> list[float]:
    times = {start, end}
    for workload in scenario.workloads:
        times.update(step.at for step in workload.schedule)
    for group in scenario.training.jobs:
        for i in range(group.count):
            times.add(group.submit_at + i * group.submit_every)
            if group.delete_at is not None:
                times.add(group.delete_at + i * group.delete_every)
    return sorted(t for t in times if start <= t <= end)


def _replicas(scenario: Scenario, t: float) -> list[int]:
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
    rooms = [
        tuple(g.count * (a[d] - per_node[d]) for d in range(3))
        for g, a in zip(groups, alloc, strict=True)
    ]
    points = _breakpoints(scenario, window.start, window.end)
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
            scenario.workloads, _replicas(scenario, start), strict=True
        ):
            kinds.append((pod_shape(workload.resources), replicas, replicas))
            scheduling = workload.scheduling
            traits.append((constraints_for(scheduling), workload.namespace,
                           scheduling.priority_class if scheduling else None))
        for group in scenario.training.jobs:
            present = sum(_present(group, i, start, end) for i in range(group.count))
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
                kinds.append((pod_shape(group.master.resources), present, present))
                traits.append(plain)
        eligible = [[not c.blocker(group_facts(g)) for g in groups] for c, _, _ in traits]
        limits = _quota_limits(scenario, kinds, traits)
        cap = scenario.autoscaler.max_load_desired * total_cpu - background
        if not per_pool:
            placed = _solve(kinds, groups, alloc, per_node, rooms, cap, eligible, limits)
            weighted += (end - start) * (background + placed) / total_cpu
            continue
        for g, node_group in enumerate(groups):
            own = node_group.count * alloc[g][0]
            if own <= 0:
                continue
            placed = _solve(kinds, groups, alloc, per_node, rooms, cap, eligible, limits, g)
            # background pods placed by count may all sit on this group (an upper bound)
            used = min(own, node_group.count * per_node[0] + counted[0] + placed)
            pool_weighted[g] += (end - start) * used / own
    span = points[-1] - points[0] if len(points) > 1 else 0.0
    if span <= 0:
        return None, None
    if not per_pool:
        return 100 * weighted / span, None
    return None, {g.name: 100 * w / span for g, w in zip(groups, pool_weighted, strict=True)}


Kind = tuple[tuple[int, int, int], int, int]  # (shape, least count, most count)
Limit = tuple[list[int], int]  # per kind: what one pod costs; the most all may cost


def _quota_limits(
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
MAX_PATTERNS = 4000  # per node group; beyond it the group's large kinds are pooled too


def _patterns(room: tuple[int, int, int], shapes: list[tuple[int, int, int]]) -> list[tuple]:
    """Every way to fill one node's room with whole pods of `shapes` (maximal or not)."""
    out: list[tuple] = []

    def walk(k: int, left: list[int], counts: list[int]) -> None:
        if len(out) > MAX_PATTERNS:
            return
        if k == len(shapes):
            out.append((tuple(counts), tuple(left)))
            return
        shape, n = shapes[k], 0
        while True:
            walk(k + 1, left, [*counts, n])
            if any(left[d] < shape[d] for d in range(3)) or all(a == 0 for a in shape):
                return
            left = [left[d] - shape[d] for d in range(3)]
            n += 1

    walk(0, list(room), [])
    return out


def _solve(
    kinds: list[Kind],
    groups: list[NodeGroup],
    alloc: list[tuple[int, int, int]],
    per_node: list[int],
    rooms: list[tuple[int, ...]],
    cap: float,
    eligible: list[list[bool]] | None = None,
    limits: Sequence[Limit] = (),
    only: int | None = None,
) -> float:
    """Most CPU the kinds can request on the groups (the integer program).

    Per node group, the *large* kinds (more than an eighth of a node's CPU, or any
    GPU) are placed by per-node patterns — exact packing — and the small kinds
    are poured into the room each chosen pattern leaves (pooled per group), a
    relaxation that stays an upper bound. A group whose patterns would be too many
    pools every kind (whole pods per node still capped).
    """
    n_kinds = len(kinds)
    if n_kinds == 0:
        return 0.0
    columns: list[tuple[int, dict[int, int], tuple[int, ...] | None]] = []
    # column: (group, {kind: pods per unit}, leftover room per unit or None)
    integral: list[int] = []
    upper: list[float] = []
    for g, group in enumerate(groups):
        room = (alloc[g][0] - per_node[0], alloc[g][1] - per_node[1], alloc[g][2] - per_node[2])
        allowed = [k for k in range(n_kinds) if eligible is None or eligible[k][g]]
        large = [
            k for k in allowed
            if kinds[k][0][2] > 0 or kinds[k][0][0] * 8 > alloc[g][0]
        ]
        shapes = [kinds[k][0] for k in large]
        found = _patterns(room, shapes) if large else [((), room)]
        pooled = len(found) > MAX_PATTERNS
        if not pooled:
            for counts, left in found:
                columns.append((g, {large[i]: c for i, c in enumerate(counts) if c}, left))
                integral.append(1)
                upper.append(group.count)
        small = allowed if pooled else [k for k in allowed if k not in large]
        for k in small:  # pooled pods of kind k in group g (room from the patterns)
            shape, _, most = kinds[k]
            fit = min(
                ((room[d]) // shape[d] for d in range(3) if shape[d] > 0), default=most
            )
            columns.append((g, {k: 1}, None))
            integral.append(1)
            upper.append(max(0, min(most, group.count * fit)))
    size = len(columns)
    rows: list[np.ndarray] = []
    low: list[float] = []
    high: list[float] = []
    for g, group in enumerate(groups):
        mine = [i for i, col in enumerate(columns) if col[0] == g]
        patterned = [i for i in mine if columns[i][2] is not None]
        if patterned:  # one pattern per node
            row = np.zeros(size)
            row[patterned] = 1
            rows.append(row)
            low.append(-np.inf)
            high.append(group.count)
        for d in range(3):  # pooled pods fit in what the patterns leave (or the group)
            row = np.zeros(size)
            for i in mine:
                _, pods, left = columns[i]
                if left is None:
                    (k, _), = pods.items()
                    row[i] = kinds[k][0][d]
                else:
                    row[i] = -left[d]
            rows.append(row)
            low.append(-np.inf)
            high.append(0 if patterned else rooms[g][d])
    first_kind_row = len(rows)
    for k, (_, lo, hi) in enumerate(kinds):
        row = np.zeros(size)
        for i, (_, pods, _) in enumerate(columns):
            row[i] = pods.get(k, 0)
        rows.append(row)
        low.append(lo)
        high.append(hi)
    for costs, most in limits:  # namespace quotas
        row = np.array([sum(costs[k] * n for k, n in pods.items()) for _, pods, _ in columns],
                       float)
        rows.append(row)
        low.append(-np.inf)
        high.append(most)
    cpu = np.array(
        [sum(kinds[k][0][0] * n for k, n in pods.items()) for _, pods, _ in columns], float
    )
    must = sum(shape[0] * lo for shape, lo, _ in kinds)
    rows.append(cpu)
    low.append(-np.inf)
    high.append(max(cap, must))
    kind_rows = range(first_kind_row, first_kind_row + n_kinds)
    # the objective: CPU requested on every group, or (`only`) on that one group
    gain = cpu if only is None else np.where(
        np.array([col[0] == only for col in columns]), cpu, 0.0)
    for relax in (False, True):
        if relax:  # what must run does not fit: then place as much of it as fits
            low = [(-np.inf if i in kind_rows else v) for i, v in enumerate(low)]
        result = milp(
            -gain,
            constraints=LinearConstraint(np.array(rows), low, high),
            integrality=np.array(integral),
            bounds=Bounds(0, np.array(upper)),
            options={"time_limit": 20},
        )
        if result.success:
            return float(-result.fun)
        dual = getattr(result, "mip_dual_bound", None)  # stopped early: still an upper bound
        if dual is not None and np.isfinite(dual):
            return float(-dual)
    return 0.0
