"""Constrained max-min fair shares of trainers, and Jain's index against them.

Jain's index over raw trainer counts calls a cluster unfair whenever constraints
make jobs unequal: on `gpu-tainted` two research jobs are capped by their quota at
about 4 trainers and three GPU jobs by the GPUs at about 10, so the index stays
near 0.7 under any allocation that does not hold the CPU jobs far below what they
can use. Jain (1984) defines the index over x_i = what job i got / its *fair*
allocation when fair allocations are not equal. The fair allocation here is the
constrained max-min one (Choosy, EuroSys '13), computed from the scenario alone,
not by the policies' code: per stretch of the steady window with constant jobs and
services, the level f rises for all jobs together (job j holds min_j + ⌊f·(max_j −
min_j)⌋ trainers, edl's unit of fairness), and a job is frozen when one more of its
trainers no longer fits — whole pods on whole nodes (`sim.packing`) beside every
service replica, master and pserver, within the taints, selectors, required
affinity and namespace quotas, and within max_load_desired. A job starved below
what it could get (a narrow job at 0 while wide jobs hold its nodes) has x near 0
and pulls the index down; a job kept above its share (holding what a narrower job
could use) has x > 1 and pulls it down too. x counts a job's present samples only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from edl.sim.bound import (
    allocatable_of,
    breakpoints,
    constraints_for,
    group_facts,
    master_shape,
    pod_shape,
    present_in,
    quota_limits,
    replicas_at,
)
from edl.sim.metrics import jain_index
from edl.sim.packing import Kind, fits
from edl.sim.scenario import Scenario
from edl.sim.timeline import Timeline

__all__ = ["fair_share_stretches", "jain_over_fair_shares"]

Stretch = tuple[float, float, dict[str, int]]  # start, end, each present job's share
_PATTERNS = 300  # fewer per-node patterns than the bound: many checks per stretch


def fair_share_stretches(scenario: Scenario) -> list[Stretch] | None:
    """Per stretch of the steady window: each present job's constrained max-min share
    in trainers (None: a job that is not compact-form)."""
    if any(group.trainer is None for group in scenario.training.jobs):
        return None
    window = scenario.measure.steady_state
    groups = scenario.cluster.node_groups
    alloc = [allocatable_of(g) for g in groups]
    per_node = [0, 0, 0]
    counted = 0
    for pods in scenario.cluster.background_pods:
        shape = pod_shape(pods.resources)
        if pods.per_node:
            per_node = [per_node[d] + shape[d] for d in range(3)]
        else:
            counted += shape[0] * (pods.count or 0)
    counts = [g.count for g in groups]
    room = [(a[0] - per_node[0], a[1] - per_node[1], a[2] - per_node[2]) for a in alloc]
    total_cpu = sum(g.count * a[0] for g, a in zip(groups, alloc, strict=True))
    cap = (scenario.autoscaler.max_load_desired * total_cpu
           - per_node[0] * sum(counts) - counted)
    out: list[Stretch] = []
    points = breakpoints(scenario, window.start, window.end)
    for start, end in itertools.pairwise(points):
        if end <= start:
            continue
        kinds: list[Kind] = []
        traits = []
        for workload, replicas in zip(scenario.workloads, replicas_at(scenario, start),
                                      strict=True):
            kinds.append((pod_shape(workload.resources), replicas, replicas))
            s = workload.scheduling
            traits.append((constraints_for(s), workload.namespace,
                           s.priority_class if s else None))
        jobs: list[tuple[str, int, int, int]] = []  # name, kind index, min, max
        for group in scenario.training.jobs:
            assert group.trainer is not None
            for index in range(group.count):
                if not present_in(group, index, start, end):
                    continue
                name = group.name.replace("{i}", str(index + 1))
                s = group.scheduling
                jobs.append((name, len(kinds), group.trainer.min, group.trainer.max))
                kinds.append((pod_shape(group.trainer.resources), 0, 0))
                traits.append((constraints_for(s), group.namespace,
                               s.priority_class if s else None))
                plain = (constraints_for(None), group.namespace, None)
                if group.pserver is not None:
                    n = group.pserver.count
                    kinds.append((pod_shape(group.pserver.resources), n, n))
                    traits.append(plain)
                if group.master is not None:
                    kinds.append((master_shape(group.master.resources), 1, 1))
                    traits.append(plain)
        if not jobs:
            continue
        eligible = [[not c.blocker(group_facts(g)) for g in groups] for c, _, _ in traits]
        limits = quota_limits(scenario, kinds, traits)

        def check(trainers: Sequence[int], kinds: list[Kind] = kinds,
                  jobs: list[tuple[str, int, int, int]] = jobs,
                  eligible: list[list[bool]] = eligible, limits: list = limits) -> bool:
            trial = list(kinds)
            for (_, k, _, _), n in zip(jobs, trainers, strict=True):
                trial[k] = (kinds[k][0], n, n)
            return fits(trial, counts, room, cap, eligible, limits, _PATTERNS)

        shares = water_fill([(low, high) for _, _, low, high in jobs], check)
        out.append((start, end, {job[0]: n for job, n in zip(jobs, shares, strict=True)}))
    return out


def water_fill(ranges: Sequence[tuple[int, int]], check) -> list[int]:  # type: ignore[no-untyped-def]
    """Trainers per job, max-min fair by level: every job at its min (an entitlement,
    even when mins do not fit); then the level rises and a job freezes when one more
    of its trainers no longer passes `check` (ties: the earlier job first)."""
    lows = [low for low, _ in ranges]
    if not check(lows):
        return lows
    frozen: dict[int, int] = {}
    memo: dict[tuple[int, ...], bool] = {}

    def ok(counts: list[int]) -> bool:
        key = tuple(counts)
        if key not in memo:
            memo[key] = check(counts)
        return memo[key]

    def at(level: float) -> list[int]:
        return [frozen[j] if j in frozen else
                min(high, low + math.floor(level * (high - low) + 1e-9))
                for j, (low, high) in enumerate(ranges)]

    level = 0.0
    while len(frozen) < len(ranges):
        open_ = [j for j in range(len(ranges)) if j not in frozen]
        steps = sorted({k / (ranges[j][1] - ranges[j][0]) for j in open_
                        for k in range(1, ranges[j][1] - ranges[j][0] + 1)
                        if k / (ranges[j][1] - ranges[j][0]) > level})
        lo, hi = -1, len(steps) - 1  # steps[lo] fits (lo = -1: the current level)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if ok(at(steps[mid])):
                lo = mid
            else:
                hi = mid - 1
        if lo >= 0:
            level = steps[lo]
        base = at(level)
        if lo == len(steps) - 1:  # everyone open reaches its max
            return base
        for j in open_:  # one more of its trainers fits no more: it never will
            more = list(base)
            more[j] += 1
            if base[j] >= ranges[j][1] or not ok(more):
                frozen[j] = base[j]
        if any(j in frozen for j in open_):
            continue
        # each job of the next step fits one more alone, not all together: the
        # earlier ones take theirs and the first that no longer fits is frozen
        after = at(steps[lo + 1])
        grown = list(base)
        for j in open_:
            if after[j] == base[j]:
                continue
            grown[j] += 1
            if not ok(grown):
                frozen[j] = base[j]
                break
        else:  # cannot be (at(steps[lo + 1]) did not fit): never loop for ever
            frozen.update({j: base[j] for j in open_})
    return at(level)


def jain_over_fair_shares(
    timeline: Timeline, stretches: Sequence[Stretch], start: float, end: float
) -> float | None:
    """Jain's index over jobs' running trainers / their fair share, summed over the
    samples of the window in which the job is present (jobs with no share skipped)."""
    ratios = []
    for name, series in timeline.jobs.items():
        got = share = 0.0
        for t, present, running in zip(timeline.times, series.present,
                                       series.trainers_running, strict=True):
            if not (start <= t <= end and present):
                continue
            for s_start, s_end, shares in stretches:
                if s_start <= t < s_end or (t == s_end == end):
                    if name in shares:
                        got += running
                        share += shares[name]
                    break
        if share > 0:
            ratios.append(got / share)
    return jain_index(ratios)
