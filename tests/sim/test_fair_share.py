"""Constrained max-min fair shares and Jain's index against them (`edl.sim.fair_share`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edl.sim.fair_share import fair_share_stretches, jain_over_fair_shares, water_fill
from edl.sim.scenario import parse_scenario
from edl.sim.timeline import JobSeries, Timeline


def _level(count: int, low: int, high: int) -> float:
    return 1.0 if high == low else (count - low) / (high - low)


@st.composite
def problems(draw: Any) -> tuple[list[tuple[int, int]], list[list[int]], list[int]]:
    """Jobs' (min, max) and limits sum_j cost[i][j] * trainers_j <= budget[i]; a zero
    cost is a job that cannot use that limit's room (random eligibility)."""
    n = draw(st.integers(1, 6))
    ranges = []
    for _ in range(n):
        low = draw(st.integers(0, 3))
        ranges.append((low, low + draw(st.integers(0, 12))))
    m = draw(st.integers(1, 4))
    costs = [[draw(st.integers(0, 4)) for _ in range(n)] for _ in range(m)]
    budgets = [draw(st.integers(0, 60)) for _ in range(m)]
    return ranges, costs, budgets


def _checker(costs: list[list[int]], budgets: list[int]):  # type: ignore[no-untyped-def]
    def check(counts: Sequence[int]) -> bool:
        return all(sum(c * n for c, n in zip(row, counts, strict=True)) <= b
                   for row, b in zip(costs, budgets, strict=True))
    return check


@settings(max_examples=150, deadline=None)
@given(problems())
def test_water_fill_is_max_min_fair_and_wastes_nothing(problem: Any) -> None:
    ranges, costs, budgets = problem
    check = _checker(costs, budgets)
    shares = water_fill(ranges, check)
    lows = [low for low, _ in ranges]
    if not check(lows):
        assert shares == lows  # mins are an entitlement even when they do not fit
        return
    assert check(shares)
    for j, ((low, high), n) in enumerate(zip(ranges, shares, strict=True)):
        assert low <= n <= high
        if n == high:
            continue
        more = list(shares)
        more[j] += 1
        assert not check(more), "a job left below its max where one more fits"
        for k, (low_k, high_k) in enumerate(ranges):  # no trainer of a fuller job helps
            if k == j or shares[k] == low_k:
                continue
            moved = list(more)
            moved[k] -= 1
            if _level(moved[k], low_k, high_k) > _level(more[j], low, high):
                assert not check(moved), (j, k, shares)


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 5), st.integers(0, 3), st.integers(1, 20), st.integers(1, 80))
def test_equal_jobs_end_within_one_trainer(n: int, low: int, span: int, budget: int) -> None:
    shares = water_fill([(low, low + span)] * n, lambda counts: sum(counts) * 3 <= budget)
    assert max(shares) - min(shares) <= 1


def _cluster(narrow_service: int = 0) -> Any:
    """A tainted 'spot' pool only the wide job tolerates, an open 'ondemand' pool."""
    job = {"trainer": {"min": 1, "max": 20, "resources": {"requests": {"cpu": "2"}}},
           "pserver": {"count": 1, "resources": {"requests": {"cpu": "0"}}},
           "master": {"resources": {"requests": {"cpu": "900m"}}}}
    data: dict[str, Any] = {
        "name": "fs", "duration_s": 100,
        "measure": {"utilization_until_s": 100, "steady_state": {"start": 20, "end": 100}},
        "autoscaler": {"max_load_desired": 1.0},
        "cluster": {"node_groups": [
            {"name": "spot", "count": 1, "allocatable": {"cpu": "8", "memory": "64Gi"},
             "labels": {"pool": "spot"}, "taints": [{"key": "spot", "effect": "NoSchedule"}]},
            {"name": "ondemand", "count": 1, "allocatable": {"cpu": "8", "memory": "64Gi"},
             "labels": {"pool": "ondemand"}}]},
        "workloads": [{"name": "svc", "resources": {"requests": {"cpu": "2"}},
                       "scheduling": {"node_selector": {"pool": "ondemand"}},
                       "schedule": [{"at": 0, "replicas": narrow_service}]}],
        "training": {"jobs": [
            {**job, "name": "wide", "submit_at": 0, "scheduling": {
                "tolerations": [{"key": "spot", "operator": "Exists"}]}},
            {**job, "name": "narrow", "submit_at": 0,
             "scheduling": {"node_selector": {"pool": "ondemand"}}}]},
    }
    return parse_scenario(data, "fs")


def test_shares_count_what_each_job_can_use() -> None:
    # masters (1 core with etcd) tolerate no taint: both on ondemand, 3 trainers of the
    # narrow job beside them; spot holds 4 of the wide job's, which it alone may use
    (stretch,) = fair_share_stretches(_cluster())  # type: ignore[misc]
    assert stretch[2] == {"wide": 4, "narrow": 3}
    # a 2-core service on ondemand: the narrow job can hold 2 there, and the wide job
    # keeps spot's 4 (it is not held down to the narrow job's count)
    (stretch,) = fair_share_stretches(_cluster(narrow_service=1))  # type: ignore[misc]
    assert stretch[2] == {"wide": 4, "narrow": 2}


def _timeline(running: dict[str, list[int]]) -> Timeline:
    times = [float(t) for t in range(20, 101, 10)]
    jobs = {name: JobSeries(present=[True] * len(times), trainers_running=values)
            for name, values in running.items()}
    return Timeline(times=times, jobs=jobs)


def test_jain_over_fair_shares_catches_starvation_not_constraints() -> None:
    stretches = [(20.0, 100.0, {"wide": 6, "narrow": 2})]
    # each job at its constrained share: fair, though the counts are 6 and 2
    fair = _timeline({"wide": [6] * 9, "narrow": [2] * 9})
    assert jain_over_fair_shares(fair, stretches, 20, 100) == pytest.approx(1.0)
    # the narrow job starved while the wide one holds its nodes: the case
    starved = _timeline({"wide": [8] * 9, "narrow": [0] * 9})
    assert jain_over_fair_shares(starved, stretches, 20, 100) == pytest.approx(0.5)
