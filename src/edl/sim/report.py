"""metrics.json, timeline.csv and the markdown table of one or several runs.

Layout of ``--out DIR``: one policy -> ``DIR/metrics.json`` and ``DIR/timeline.csv``;
several policies -> ``DIR/<policy>/metrics.json`` and ``DIR/<policy>/timeline.csv``
each; the table (``DIR/table.md``) and the plots are always at the top of ``DIR``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from pathlib import Path

from edl.sim.metrics import Metrics
from edl.sim.timeline import Timeline


def metrics_json(metrics: Metrics) -> str:
    """Canonical text: sorted keys, rounded floats, trailing newline — byte-stable."""
    return json.dumps(metrics.as_json(), sort_keys=True, indent=2) + "\n"


def write_metrics(results: list[Metrics], directory: Path) -> list[Path]:
    """Write metrics.json files in the documented layout; returns their paths."""
    paths: list[Path] = []
    for metrics in results:
        target = directory if len(results) == 1 else directory / metrics.policy
        target.mkdir(parents=True, exist_ok=True)
        path = target / "metrics.json"
        path.write_text(metrics_json(metrics), encoding="utf-8")
        paths.append(path)
    return paths


def _number(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _flag(value: bool | None) -> str:
    return "n/a" if value is None else ("yes" if value else "no")


def _window(results: list[Metrics]) -> tuple[str, str]:
    """The utilisation columns' labels, from the scenarios' own measuring windows."""
    untils = {m.utilization_until_s for m in results}
    steadies = {m.steady_window_s for m in results}
    until = untils.pop() if len(untils) == 1 else None
    steady = steadies.pop() if len(steadies) == 1 else None
    first = (f"CPU in use, first {until:g} s (%)" if until is not None
             else "CPU in use, up to measure.utilization_until_s (%)")
    window = (f"CPU in use, steady state {steady[0]:g}–{steady[1]:g} s (%)" if steady is not None
              else "CPU in use, steady state (%)")
    return first, window


def markdown_table(results: list[Metrics]) -> str:
    """One row per policy; pending time both as the true mean and the original's formula.

    The bound column is what a policy keeping requests within max_load_desired can
    reach at best (`edl.sim.bound`); `static` plans nothing, so it may exceed it.
    """
    first, window = _window(results)
    lines = [
        "| scenario | policy | mean wait for a first trainer (s) "
        f"| same, by the 2017 paper's formula (×10/11) (s) | {first} "
        f"| {window} | fairness (Jain's index, 1 = equal) "
        "| jobs that never started | longest a service lagged its target (s) "
        "| every service reached its target | service replicas missing × time (replica·s) "
        "| steady CPU use at best within max-load (%) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for m in results:
        lines.append(
            f"| {m.scenario} | {m.policy} | {_number(m.avg_pending_s)} "
            f"| {_number(m.avg_pending_original_formula_s)} | {_number(m.utilization_pct)} "
            f"| {_number(m.steady_utilization_pct)} | {_number(m.jain_fairness, 2)} "
            f"| {m.jobs_never_started} | {_number(m.service_max_lag_s)} "
            f"| {_flag(m.service_targets_reached)} | {_number(m.service_shortfall_replica_s, 0)} "
            f"| {_number(m.steady_utilization_bound_pct)} |"
        )
    if any(m.jobs_below_min_s is not None or m.steady_utilization_by_pool_pct
           for m in results):
        lines += [
            "",
            "| scenario | policy | jobs below min while a job sharing nodes ran above "
            "its own (job·s) | Jain's index over trainers / constrained fair share "
            "(with --bound) | steady CPU use per node pool (%; at best: alone, with --bound) |",
            "|---|---|---:|---:|---|",
        ]
        for m in results:
            bounds = m.steady_utilization_bound_by_pool_pct or {}
            pools = ", ".join(
                f"{name} {value:.1f}" + (f" (at best {bounds[name]:.1f})" if name in bounds
                                         else "")
                for name, value in (m.steady_utilization_by_pool_pct or {}).items()) or "n/a"
            lines.append(f"| {m.scenario} | {m.policy} | {_number(m.jobs_below_min_s, 0)} "
                         f"| {_number(m.jain_fair_share, 2)} | {pools} |")
    if any(m.jct_by_job is not None for m in results):
        lines += [
            "",
            "| scenario | policy | JCT mean (s) | JCT p95 (s) | makespan (s) "
            "| resizes / job-hour | jobs unfinished | JCT mean bound (s) |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for m in results:
            lines.append(
                f"| {m.scenario} | {m.policy} | {_number(m.jct_mean_s)} | {_number(m.jct_p95_s)} "
                f"| {_number(m.makespan_s)} | {_number(m.resizes_per_job_hour)} "
                f"| {len(m.unfinished_names)} | {_number(m.jct_mean_bound_s)} |"
            )
    return "\n".join(lines) + "\n"


def write_table(results: list[Metrics], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "table.md"
    path.write_text(markdown_table(results), encoding="utf-8")
    return path


def timeline_csv(
    timeline: Timeline, job_namespaces: Mapping[str, str],
    workload_namespaces: Mapping[str, str],
) -> str:
    """One row per sample: ``t_s``, ``cpu_running_pct``, then ``trainers_running:<ns>/<job>``
    per job and ``replicas_running:<ns>/<w>``, ``replicas_desired:<ns>/<w>`` per workload.

    ``*_namespaces`` map the timeline's keys (a name, or ``ns/name`` outside
    ``default``) to their namespace; a key missing there is read as ``ns/name`` or
    ``default``.
    """
    def qualified(key: str, namespaces: Mapping[str, str]) -> str:
        if "/" in key:
            return key
        return f"{namespaces.get(key, 'default')}/{key}"

    jobs = sorted(timeline.jobs)
    workloads = sorted(timeline.workloads)
    header = ["t_s", "cpu_running_pct"]
    header += [f"trainers_running:{qualified(k, job_namespaces)}" for k in jobs]
    for key in workloads:
        name = qualified(key, workload_namespaces)
        header += [f"replicas_running:{name}", f"replicas_desired:{name}"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    utilization = timeline.utilization_pct()
    for row, when in enumerate(timeline.times):
        values: list[object] = [f"{when:g}", f"{utilization[row]:.3f}"]
        values += [timeline.jobs[k].trainers_running[row] for k in jobs]
        for key in workloads:
            series = timeline.workloads[key]
            values += [series.running[row], series.desired[row]]
        writer.writerow(values)
    return out.getvalue()


def write_timelines(
    timelines: Mapping[str, Timeline], directory: Path, job_namespaces: Mapping[str, str],
    workload_namespaces: Mapping[str, str],
) -> list[Path]:
    """Write timeline.csv per policy in the documented layout; returns their paths."""
    paths = []
    for policy, timeline in timelines.items():
        target = directory if len(timelines) == 1 else directory / policy
        target.mkdir(parents=True, exist_ok=True)
        path = target / "timeline.csv"
        path.write_text(
            timeline_csv(timeline, job_namespaces, workload_namespaces), encoding="utf-8")
        paths.append(path)
    return paths
