"""An upper bound on the steady-state CPU utilisation any policy could reach.

For every stretch of the steady window in which the set of present jobs and the
services' desired replicas stay constant, an integer program places the pods
that must run — every service replica, every present job's master and pservers
and its min-instance trainers — and as many trainers (up to max-instance) as fit,
maximising the CPU requested; the bound is the time-weighted mean, plus the
background pods. Each node group is one pool of room (count x allocatable minus
its per-node background pods), and every pod kind is capped at the whole pods
of it one node can hold times the node count; so the program is a *relaxation*
of exact per-node packing (mixes of kinds on one node are not checked), which
keeps it an upper bound: no real placement can beat it. Requests within
max_load_desired of the cluster, as the policies keep them (unless the pods that
must run alone exceed it). `scipy.optimize.milp` (HiGHS) solves each stretch.

Only compact-form jobs are modelled (a full TrainingJob manifest gives None).
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from edl.api.quantity import cpu_milli, memory_mega
from edl.sim.scenario import JobGroup, NodeGroup, PodResources, Scenario

__all__ = ["steady_utilization_bound"]


def _shape(resources: PodResources) -> tuple[int, int, int]:
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


def steady_utilization_bound(scenario: Scenario) -> float | None:
    """Best steady-window CPU utilisation (%) any plan and placement could reach."""
    if any(group.trainer is None for group in scenario.training.jobs):
        return None
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
        shape = _shape(pods.resources)
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
    for start, end in itertools.pairwise(points):
        if end <= start:
            continue
        # kinds: (shape, low, high); services and job overheads fixed, trainers ranged
        kinds: list[Kind] = []
        for workload, replicas in zip(
            scenario.workloads, _replicas(scenario, start), strict=True
        ):
            kinds.append((_shape(workload.resources), replicas, replicas))
        for group in scenario.training.jobs:
            present = sum(_present(group, i, start, end) for i in range(group.count))
            if not present:
                continue
            assert group.trainer is not None
            trainer = group.trainer
            kinds.append((_shape(trainer.resources), present * trainer.min, present * trainer.max))
            if group.pserver is not None:
                n = present * group.pserver.count
                kinds.append((_shape(group.pserver.resources), n, n))
            if group.master is not None:
                kinds.append((_shape(group.master.resources), present, present))
        cap = scenario.autoscaler.max_load_desired * total_cpu - background
        placed = _solve(kinds, groups, alloc, per_node, rooms, cap)
        weighted += (end - start) * (background + placed) / total_cpu
    span = points[-1] - points[0] if len(points) > 1 else 0.0
    return None if span <= 0 else 100 * weighted / span


Kind = tuple[tuple[int, int, int], int, int]  # (shape, least count, most count)


def _solve(
    kinds: list[Kind],
    groups: list[NodeGroup],
    alloc: list[tuple[int, int, int]],
    per_node: list[int],
    rooms: list[tuple[int, ...]],
    cap: float,
) -> float:
    """Most CPU the kinds can request on the groups (the integer program)."""
    n_kinds, n_groups = len(kinds), len(groups)
    if n_kinds == 0:
        return 0.0
    size = n_kinds * n_groups  # variable (k, g) at k * n_groups + g
    upper = np.zeros(size)
    for k, (shape, _, high) in enumerate(kinds):
        for g, group in enumerate(groups):
            fit = min(
                ((alloc[g][d] - per_node[d]) // shape[d] for d in range(3) if shape[d] > 0),
                default=high,
            )
            upper[k * n_groups + g] = max(0, min(high, group.count * fit))
    rows, low, high = [], [], []
    for g in range(n_groups):
        for d in range(3):
            row = np.zeros(size)
            for k, (shape, _, _) in enumerate(kinds):
                row[k * n_groups + g] = shape[d]
            rows.append(row)
            low.append(-np.inf)
            high.append(rooms[g][d])
    for k, (_, lo, hi) in enumerate(kinds):
        row = np.zeros(size)
        row[k * n_groups : (k + 1) * n_groups] = 1
        rows.append(row)
        low.append(lo)
        high.append(hi)
    cpu = np.array([kinds[k][0][0] for k in range(n_kinds) for _ in range(n_groups)], float)
    must = sum(shape[0] * lo for shape, lo, _ in kinds)
    rows.append(cpu)
    low.append(-np.inf)
    high.append(max(cap, must))
    for relax in (False, True):
        if relax:  # what must run does not fit: then place as much of it as fits
            low = [(-np.inf if i >= 3 * n_groups else v) for i, v in enumerate(low)]
        result = milp(
            -cpu,
            constraints=LinearConstraint(np.array(rows), low, high),
            integrality=np.ones(size),
            bounds=Bounds(0, upper),
        )
        if result.success:
            return float(-result.fun)
    return 0.0
