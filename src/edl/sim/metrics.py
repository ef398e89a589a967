"""Metrics of a run: pure functions over a `Timeline`.

Definitions follow the original experiment (docs/simulation.md):

* pending time of a job = time of the first sample with a running trainer − time of
  the first sample with any of its pods; a job that never starts counts until it is
  deleted (or the run ends);
* CPU utilisation = 100 × CPU requests of Running pods / allocatable CPU, averaged
  over samples with t ≤ ``until`` (the original: 550 s) or within a window;
* Jain's fairness index over the jobs' mean running trainers in the steady window,
  and (with the bound) over running trainers / constrained fair share (`sim.fair_share`);
* a workload's lag = for each constant target, seconds until running == desired;
* for jobs with work (`sim/work.py`) only: job completion time (JCT) = end of its
  work − submission (an unfinished job counts until the run ends, and is counted
  in ``jobs_unfinished``); makespan = last end − first submission; resizes per job
  hour = changes of the trainer Job's parallelism while the job runs, over the
  jobs' summed lifetimes. Scenarios without work report none of these keys.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

from edl.sim.timeline import JobSeries, Timeline, WorkloadSeries

ORIGINAL_PASSES = 10
ORIGINAL_DIVISOR = 11
"""The published averages summed 10 passes and divided by 11 (found in the raw data)."""

METRIC_KEYS = (
    "policy",
    "scenario",
    "avg_pending_s",
    "utilization_pct",
    "steady_utilization_pct",
    "jain_fairness",
    "jain_fair_share",
    "jobs_never_started",
    "service_max_lag_s",
    "service_targets_reached",
    "service_shortfall_replica_s",
    "steady_utilization_bound_pct",
    "jobs_below_min_s",
    "steady_utilization_by_pool_pct",
    "steady_utilization_bound_by_pool_pct",
)
WORK_METRIC_KEYS = (
    "jct_mean_s",
    "jct_p95_s",
    "makespan_s",
    "resizes_per_job_hour",
    "jobs_unfinished",
    "jct_mean_bound_s",
)


def _first(flags: Iterable[bool], start: int = 0) -> int | None:
    for index, flag in enumerate(flags):
        if index >= start and flag:
            return index
    return None


def job_pending_time(times: list[float], series: JobSeries) -> float | None:
    """Seconds from the job's first pod to its first running trainer (None: never submitted)."""
    appeared = _first(series.pods_created)
    if appeared is None:
        appeared = _first(series.present)
    if appeared is None:
        return None
    started = _first((running > 0 for running in series.trainers_running), appeared)
    if started is not None:
        return times[started] - times[appeared]
    gone = _first((not present for present in series.present), appeared)
    end = times[gone] if gone is not None else times[-1]
    return end - times[appeared]


def pending_times(timeline: Timeline) -> dict[str, float]:
    """Pending time of every job that was submitted during the run."""
    out: dict[str, float] = {}
    for name, series in timeline.jobs.items():
        value = job_pending_time(timeline.times, series)
        if value is not None:
            out[name] = value
    return out


def mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return sum(items) / len(items) if items else None


def original_formula(true_mean: float | None) -> float | None:
    """The original's published figure for the same runs: 10 passes divided by 11."""
    return None if true_mean is None else true_mean * ORIGINAL_PASSES / ORIGINAL_DIVISOR


def mean_utilization(timeline: Timeline, start: float, end: float) -> float | None:
    """Mean CPU utilisation (%) of samples with start ≤ t ≤ end."""
    values = [
        value
        for t, value in zip(timeline.times, timeline.utilization_pct(), strict=True)
        if start <= t <= end
    ]
    return mean(values)


def steady_trainers(timeline: Timeline, start: float, end: float) -> dict[str, float]:
    """Mean running trainers per job over the window, for jobs present in it."""
    out: dict[str, float] = {}
    for name, series in timeline.jobs.items():
        values = [
            running
            for t, present, running in zip(
                timeline.times, series.present, series.trainers_running, strict=True
            )
            if start <= t <= end and present
        ]
        if values:
            out[name] = sum(values) / len(values)
    return out


def jain_index(values: Iterable[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 = equal shares, 1/n = one job has all."""
    items = list(values)
    squares = sum(value * value for value in items)
    if not items or squares == 0:
        return None
    return sum(items) ** 2 / (len(items) * squares)


def jobs_never_started(timeline: Timeline) -> list[str]:
    """Jobs that were submitted but never had a running trainer."""
    return sorted(
        name
        for name, series in timeline.jobs.items()
        if any(series.present) and not any(running > 0 for running in series.trainers_running)
    )


@dataclass(frozen=True)
class TargetLag:
    """One constant target of a workload and how long it took to reach it."""

    at: float
    desired: int
    lag_s: float
    reached: bool


def workload_lags(times: list[float], series: WorkloadSeries) -> list[TargetLag]:
    """For each stretch of constant desired replicas: time until running == desired.

    A target not reached before it changes (or the run ends) counts its whole stretch.
    """
    out: list[TargetLag] = []
    index = 0
    while index < len(times):
        desired = series.desired[index]
        stop = index
        while stop + 1 < len(times) and series.desired[stop + 1] == desired:
            stop += 1
        hit = next(
            (row for row in range(index, stop + 1) if series.running[row] == desired), None
        )
        if hit is not None:
            out.append(TargetLag(times[index], desired, times[hit] - times[index], True))
        else:
            end = times[stop + 1] if stop + 1 < len(times) else times[stop]
            out.append(TargetLag(times[index], desired, end - times[index], False))
        index = stop + 1
    return out


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile (q in (0, 100]): the smallest value with q % at or below it."""
    items = sorted(values)
    if not items:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(items)))
    return items[rank - 1]


def completion_times(timeline: Timeline) -> tuple[dict[str, float], list[str]]:
    """JCT of every job with work, and the names of those that never finished."""
    end = timeline.times[-1] if timeline.times else 0.0
    out: dict[str, float] = {}
    unfinished = []
    for name, submitted in timeline.work_submitted.items():
        finished = timeline.work_finished.get(name)
        if finished is None:
            unfinished.append(name)
        out[name] = (finished if finished is not None else end) - submitted
    return out, sorted(unfinished)


def makespan(timeline: Timeline) -> float | None:
    """Last end of work (or the run's end if a job never finished) − first submission."""
    if not timeline.work_submitted:
        return None
    end = timeline.times[-1] if timeline.times else 0.0
    last = max(
        timeline.work_finished.get(name, end) for name in timeline.work_submitted
    )
    return last - min(timeline.work_submitted.values())


def resizes_per_job_hour(timeline: Timeline, jct: dict[str, float]) -> float | None:
    """Parallelism changes of jobs with work (counted by the runner as they happen, the
    scenario's start count excluded), per hour of the jobs' lifetimes."""
    hours = sum(jct.values()) / 3600.0
    if hours <= 0:
        return None
    return sum(timeline.work_resizes.get(name, 0) for name in jct) / hours


def service_shortfall(timeline: Timeline) -> float | None:
    """Σ over samples and workloads of (desired − running) replicas x the time to the
    next sample: a service stuck below its target shows here, its lag only says it
    never got there. None without other workloads."""
    if not timeline.workloads:
        return None
    times = timeline.times
    steps = [b - a for a, b in itertools.pairwise(times)] + [0.0]
    return sum(
        max(0, desired - running) * step
        for series in timeline.workloads.values()
        for desired, running, step in zip(series.desired, series.running, steps, strict=True)
    )


def jobs_below_min_seconds(
    timeline: Timeline, mins: dict[str, int], overlaps: dict[str, frozenset[str]]
) -> float | None:
    """Σ over jobs of the seconds a present job ran fewer trainers than its min while
    some job that can use some of the same nodes ran more than its own min (room that
    could have been its). None when no job's min is known."""
    names = [name for name in timeline.jobs if name in mins]
    if not names:
        return None
    times = timeline.times
    steps = [b - a for a, b in itertools.pairwise(times)] + [0.0]
    total = 0.0
    for name in names:
        series = timeline.jobs[name]
        others = [(timeline.jobs[o], mins[o]) for o in overlaps.get(name, ())
                  if o in timeline.jobs and o in mins]
        for row, step in enumerate(steps):
            if not series.present[row] or series.trainers_running[row] >= mins[name]:
                continue
            if any(other.trainers_running[row] > low for other, low in others):
                total += step
    return total


def pool_utilization(timeline: Timeline, start: float, end: float) -> dict[str, float] | None:
    """Per node pool: mean CPU utilisation (%) of samples with start ≤ t ≤ end."""
    if not timeline.cpu_running_by_pool:
        return None
    rows = [i for i, t in enumerate(timeline.times) if start <= t <= end]
    if not rows:
        return None
    out = {}
    for pool, running in sorted(timeline.cpu_running_by_pool.items()):
        total = timeline.cpu_allocatable_by_pool.get(pool, 0)
        if total:
            out[pool] = 100.0 * sum(running[i] for i in rows) / (len(rows) * total)
    return out


@dataclass(frozen=True)
class Metrics:
    """Everything a run reports; `as_json` keeps exactly the published keys."""

    policy: str
    scenario: str
    avg_pending_s: float | None
    avg_pending_original_formula_s: float | None
    utilization_pct: float | None
    steady_utilization_pct: float | None
    jain_fairness: float | None
    jobs_never_started: int
    never_started_names: tuple[str, ...]
    service_max_lag_s: float | None
    service_targets_reached: bool | None
    pending_by_job: dict[str, float]
    lags_by_workload: dict[str, list[TargetLag]]
    jct_by_job: dict[str, float] | None = None
    jct_mean_s: float | None = None
    jct_p95_s: float | None = None
    makespan_s: float | None = None
    resizes_per_job_hour: float | None = None
    unfinished_names: tuple[str, ...] = ()
    service_shortfall_replica_s: float | None = None
    steady_utilization_bound_pct: float | None = None  # `edl.sim.bound`, when asked for
    jct_mean_bound_s: float | None = None  # `edl.sim.jct_bound`, when asked for
    jobs_below_min_s: float | None = None
    steady_utilization_by_pool_pct: dict[str, float] | None = None
    steady_utilization_bound_by_pool_pct: dict[str, float] | None = None  # with the bound
    jain_fair_share: float | None = None  # `edl.sim.fair_share`, with the bound
    # the scenario's measuring windows, for labels (not in metrics.json)
    utilization_until_s: float | None = None
    steady_window_s: tuple[float, float] | None = None

    def as_json(self, digits: int = 3) -> dict[str, object]:
        """The metrics.json object: fixed keys, floats rounded so runs compare byte for byte."""
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, digits)

        out: dict[str, object] = {
            "policy": self.policy,
            "scenario": self.scenario,
            "avg_pending_s": rounded(self.avg_pending_s),
            "utilization_pct": rounded(self.utilization_pct),
            "steady_utilization_pct": rounded(self.steady_utilization_pct),
            "jain_fairness": rounded(self.jain_fairness),
            "jain_fair_share": rounded(self.jain_fair_share),
            "jobs_never_started": self.jobs_never_started,
            "service_max_lag_s": rounded(self.service_max_lag_s),
            "service_targets_reached": self.service_targets_reached,
            "service_shortfall_replica_s": rounded(self.service_shortfall_replica_s),
            "steady_utilization_bound_pct": rounded(self.steady_utilization_bound_pct),
            "jobs_below_min_s": rounded(self.jobs_below_min_s),
            "steady_utilization_by_pool_pct": None if self.steady_utilization_by_pool_pct is None
            else {k: rounded(v) for k, v in self.steady_utilization_by_pool_pct.items()},
            "steady_utilization_bound_by_pool_pct":
            None if self.steady_utilization_bound_by_pool_pct is None
            else {k: rounded(v) for k, v in self.steady_utilization_bound_by_pool_pct.items()},
        }
        if self.jct_by_job is not None:
            out.update(
                jct_mean_s=rounded(self.jct_mean_s),
                jct_p95_s=rounded(self.jct_p95_s),
                makespan_s=rounded(self.makespan_s),
                resizes_per_job_hour=rounded(self.resizes_per_job_hour),
                jobs_unfinished=len(self.unfinished_names),
                jct_mean_bound_s=rounded(self.jct_mean_bound_s),
            )
        return out


def compute_metrics(
    timeline: Timeline,
    *,
    policy: str,
    scenario: str,
    utilization_until_s: float,
    steady_start_s: float,
    steady_end_s: float,
    mins: dict[str, int] | None = None,
    overlaps: dict[str, frozenset[str]] | None = None,
) -> Metrics:
    """All metrics of one run."""
    pending = pending_times(timeline)
    avg_pending = mean(pending.values())
    never = jobs_never_started(timeline)
    lags = {name: workload_lags(timeline.times, s) for name, s in timeline.workloads.items()}
    all_lags = [lag for per in lags.values() for lag in per]
    work: dict[str, object] = {}
    if timeline.work_submitted:
        jct, unfinished = completion_times(timeline)
        work = {
            "jct_by_job": jct,
            "jct_mean_s": mean(jct.values()),
            "jct_p95_s": percentile(jct.values(), 95),
            "makespan_s": makespan(timeline),
            "resizes_per_job_hour": resizes_per_job_hour(timeline, jct),
            "unfinished_names": tuple(unfinished),
        }
    return Metrics(
        policy=policy,
        scenario=scenario,
        avg_pending_s=avg_pending,
        avg_pending_original_formula_s=original_formula(avg_pending),
        utilization_pct=mean_utilization(timeline, float("-inf"), utilization_until_s),
        steady_utilization_pct=mean_utilization(timeline, steady_start_s, steady_end_s),
        jain_fairness=jain_index(steady_trainers(timeline, steady_start_s, steady_end_s).values()),
        jobs_never_started=len(never),
        never_started_names=tuple(never),
        service_max_lag_s=max((lag.lag_s for lag in all_lags), default=None),
        service_targets_reached=all(lag.reached for lag in all_lags) if all_lags else None,
        pending_by_job=pending,
        lags_by_workload=lags,
        service_shortfall_replica_s=service_shortfall(timeline),
        jobs_below_min_s=jobs_below_min_seconds(timeline, mins or {}, overlaps or {}),
        steady_utilization_by_pool_pct=pool_utilization(timeline, steady_start_s, steady_end_s),
        utilization_until_s=utilization_until_s,
        steady_window_s=(steady_start_s, steady_end_s),
        **work,  # type: ignore[arg-type]  # work_metrics' fields, typed there
    )
