"""Metric functions on hand-made timelines, with exact expected values."""

from __future__ import annotations

import json

import pytest

from edl.sim.metrics import (
    METRIC_KEYS,
    Metrics,
    compute_metrics,
    jain_index,
    job_pending_time,
    jobs_below_min_seconds,
    original_formula,
    pool_utilization,
    workload_lags,
)
from edl.sim.report import markdown_table, metrics_json
from edl.sim.timeline import JobSeries, Timeline, WorkloadSeries

TIMES = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]


def job(present: str, pods: list[int], running: list[int]) -> JobSeries:
    return JobSeries(
        present=[flag == "1" for flag in present],
        pods_created=[count > 0 for count in pods],
        trainers_running=running,
        trainers_desired=[max(r, 1) for r in running],
    )


def timeline() -> Timeline:
    return Timeline(
        times=list(TIMES),
        cpu_running_milli=[0, 500, 1000, 1000, 800, 200],
        cpu_allocatable_milli=[1000] * 6,
        jobs={
            # pods appear at 10, trainer runs at 30: pending 20 s
            "a": job("111111", [0, 3, 3, 3, 3, 3], [0, 0, 0, 2, 2, 2]),
            # never starts, deleted at 40: pending 40 - 10 = 30 s
            "b": job("011100", [0, 2, 2, 2, 0, 0], [0, 0, 0, 0, 0, 0]),
            # submitted at 20, starts at once: pending 0 s; runs 4 trainers
            "c": job("001111", [0, 0, 5, 5, 5, 5], [0, 0, 4, 4, 4, 4]),
        },
        workloads={
            # 2 -> reached at 10 (lag 10); 4 at 20 -> reached 40 (lag 20); 0 at 50 -> never
            "web": WorkloadSeries(desired=[2, 2, 4, 4, 4, 0], running=[0, 2, 2, 3, 4, 1]),
        },
    )


def test_pending_time_definitions() -> None:
    t = timeline()
    assert job_pending_time(TIMES, t.jobs["a"]) == 20.0
    assert job_pending_time(TIMES, t.jobs["b"]) == 30.0
    assert job_pending_time(TIMES, t.jobs["c"]) == 0.0
    never_submitted = job("000000", [0] * 6, [0] * 6)
    assert job_pending_time(TIMES, never_submitted) is None
    # never started and never deleted: counts until the end of the run
    waiting = job("011111", [0, 1, 1, 1, 1, 1], [0] * 6)
    assert job_pending_time(TIMES, waiting) == 40.0


def test_original_formula_reproduces_the_published_figures() -> None:
    assert original_formula(47.2) == pytest.approx(42.9, abs=0.05)
    assert original_formula(308.5) == pytest.approx(280.5, abs=0.05)
    assert original_formula(None) is None


def test_jain_index() -> None:
    assert jain_index([5, 5, 5, 5]) == 1.0
    assert jain_index([8, 0, 0, 0]) == 0.25
    # the original's static case 1: 6 jobs at 60 trainers, 14 at 0
    assert jain_index([60] * 6 + [0] * 14) == pytest.approx(0.3)
    assert jain_index([]) is None
    assert jain_index([0, 0]) is None


def test_workload_lags() -> None:
    lags = workload_lags(TIMES, timeline().workloads["web"])
    assert [(lag.at, lag.desired, lag.lag_s, lag.reached) for lag in lags] == [
        (0.0, 2, 10.0, True),
        (20.0, 4, 20.0, True),
        (50.0, 0, 0.0, False),
    ]


def test_compute_metrics_and_json() -> None:
    metrics = compute_metrics(
        timeline(), policy="default", scenario="hand", utilization_until_s=30.0,
        steady_start_s=30.0, steady_end_s=50.0,
    )
    assert metrics.pending_by_job == {"a": 20.0, "b": 30.0, "c": 0.0}
    assert metrics.avg_pending_s == pytest.approx(50 / 3)
    # samples t <= 30: 0, 50, 100, 100 %
    assert metrics.utilization_pct == 62.5
    # samples 30..50: 100, 80, 20 %
    assert metrics.steady_utilization_pct == pytest.approx(200 / 3)
    # steady window: a runs 2, c runs 4, b is present at 30 only with 0 -> [2, 4, 0]
    assert metrics.jain_fairness == pytest.approx(36 / (3 * 20))
    assert metrics.never_started_names == ("b",)
    assert metrics.jobs_never_started == 1
    assert metrics.service_max_lag_s == 20.0
    assert metrics.service_targets_reached is False

    text = metrics_json(metrics)
    loaded = json.loads(text)
    assert set(loaded) == set(METRIC_KEYS)
    assert loaded["avg_pending_s"] == 16.667
    assert list(loaded) == sorted(loaded)
    assert text == metrics_json(metrics)
    table = markdown_table([metrics])
    row = "| hand | default | 16.7 | 15.2 | 62.5 | 66.7 | 0.60 | 1 | 20.0 | no | 50 | n/a |"
    assert row in table
    # short of desired by 2, 0, 2, 1, 0 replicas for 10 s each (the last sample: 0 s)
    assert loaded["service_shortfall_replica_s"] == 50.0
    assert loaded["steady_utilization_bound_pct"] is None


def test_no_workloads_and_no_jobs_give_nulls() -> None:
    empty = Timeline(times=[0.0, 1.0], cpu_running_milli=[0, 0], cpu_allocatable_milli=[10, 10])
    metrics = compute_metrics(
        empty, policy="static", scenario="empty", utilization_until_s=550,
        steady_start_s=0, steady_end_s=1,
    )
    loaded = json.loads(metrics_json(metrics))
    assert loaded["avg_pending_s"] is None
    assert loaded["jain_fairness"] is None
    assert loaded["service_max_lag_s"] is None
    assert loaded["service_targets_reached"] is None
    assert loaded["service_shortfall_replica_s"] is None
    assert loaded["utilization_pct"] == 0.0


def test_the_table_labels_the_scenarios_own_windows_and_what_the_bound_bounds() -> None:
    """Issue 24: every table said 'first 550 s'; the bound read 'possible at best'
    although static (which ignores max-load) beats it."""
    empty = Timeline(times=[0.0, 1.0], cpu_running_milli=[0, 0], cpu_allocatable_milli=[10, 10])

    def run(until: float, start: float, end: float) -> Metrics:
        return compute_metrics(empty, policy="static", scenario="s", utilization_until_s=until,
                               steady_start_s=start, steady_end_s=end)

    header = markdown_table([run(120, 30, 90)]).splitlines()[0]
    assert "CPU in use, first 120 s (%)" in header and "550" not in header
    assert "steady state 30–90 s" in header
    assert "steady CPU use at best within max-load (%)" in header
    mixed = markdown_table([run(120, 30, 90), run(550, 100, 500)]).splitlines()[0]
    assert "up to measure.utilization_until_s" in mixed and "first 120 s" not in mixed


def test_jobs_below_min_counts_only_while_a_job_sharing_nodes_runs_above_its_min() -> None:
    """a (min 2) is below min at 0-30; c (min 2, sharing a's nodes) runs 4 from 20 on:
    10 s counted (20-30). b (min 1) shares nothing with c: its 0 trainers never count."""
    t = timeline()
    mins = {"a": 2, "b": 1, "c": 2}
    overlaps = {"a": frozenset({"c"}), "b": frozenset(), "c": frozenset({"a"})}
    assert jobs_below_min_seconds(t, mins, overlaps) == 10.0
    overlaps = {"a": frozenset({"c"}), "b": frozenset({"c"}), "c": frozenset({"a", "b"})}
    assert jobs_below_min_seconds(t, mins, overlaps) == 10.0 + 20.0  # b at 20-40 too
    assert jobs_below_min_seconds(t, {}, {}) is None


def test_pool_utilization_over_the_window() -> None:
    t = timeline()
    t.cpu_allocatable_by_pool = {"cpu": 800, "gpu": 200}
    t.cpu_running_by_pool = {"cpu": [0, 400, 800, 800, 600, 200], "gpu": [0, 100, 200, 200, 200, 0]}
    assert pool_utilization(t, 20.0, 40.0) == {
        "cpu": pytest.approx(100 * 2200 / 2400), "gpu": 100.0}
    assert pool_utilization(Timeline(times=[0.0]), 0.0, 1.0) is None


def test_gpu_tainted_pools_keep_cpu_and_gpu_jobs_apart() -> None:
    from edl.sim.pools import job_overlaps
    from edl.sim.scenario import load_scenario

    overlaps = job_overlaps(load_scenario("gpu-tainted"))
    assert "gpu-1" not in overlaps["cpu-1"] and "cpu-2" in overlaps["cpu-1"]
    assert overlaps["gpu-1"] == frozenset({"gpu-2", "gpu-3"})
    assert "research-1" in overlaps["cpu-1"]
