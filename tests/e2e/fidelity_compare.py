"""Compare a simulated and a real timeline of one scenario (pure; tests/e2e/fidelity.py
records the real one).

The run is cut into stretches at the scenario's events (submissions, deletions, replica
changes). In each stretch the allocation "after the event settles" is every job's
running trainers at the stretch's last sample, and the settle time is how long after the
event the trainer counts last changed. "The same allocation" is exact equality with the
simulated run (`Stretch.same`); where the simulator is given more seeds, `determined`
is equality on what every seed agrees on (`Stretch.determined` says exactly what).
Utilisation is compared as `edl simulate`'s `utilization_pct` (mean over samples up to
`measure.utilization_until_s`) and per stretch.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from edl.sim.metrics import mean_utilization
from edl.sim.scenario import Scenario, expand_jobs
from edl.sim.timeline import Timeline


@dataclass(frozen=True)
class Stretch:
    """From one event to the next: what each side settled on and how fast."""

    start: float
    end: float
    sim: dict[str, int]  # job -> running trainers at the stretch's last sample
    real: dict[str, int]
    sim_settle_s: float  # event -> last change of any job's trainer count in the stretch
    real_settle_s: float
    sim_util_pct: float  # mean utilisation over the stretch
    real_util_pct: float
    # the simulator's allocation under other seeds (empty: only `sim` was run)
    others: tuple[dict[str, int], ...] = ()

    @property
    def same(self) -> bool:
        """Every job's running trainers equal the simulated run's."""
        return self.sim == self.real

    @property
    def determined(self) -> bool:
        """The real allocation agrees on everything the simulator's seeds agree on: a job
        whose trainer count is the same under every seed has that count; the jobs whose
        count varies have together the total they have under every seed, each within the
        range the seeds span. (Under one seed, or where all agree: `same`.)"""
        seeds = (self.sim, *self.others)
        jobs = {job for allocation in (*seeds, self.real) for job in allocation}
        varying = {job for job in jobs if len({a.get(job, 0) for a in seeds}) > 1}
        if any(self.real.get(job, 0) != self.sim.get(job, 0) for job in jobs - varying):
            return False
        totals = {sum(a.get(job, 0) for job in varying) for a in seeds}
        if len(totals) > 1:  # the seeds disagree on the total too: one of them, exactly
            return self.real in seeds
        return sum(self.real.get(job, 0) for job in varying) in totals and all(
            min(a.get(job, 0) for a in seeds) <= self.real.get(job, 0)
            <= max(a.get(job, 0) for a in seeds) for job in varying)


@dataclass(frozen=True)
class Comparison:
    sim_util_pct: float
    real_util_pct: float
    stretches: list[Stretch]

    @property
    def util_diff_pct(self) -> float:
        return self.real_util_pct - self.sim_util_pct

    def table(self) -> str:
        """Markdown: one row per stretch, then the overall utilisation."""
        jobs = sorted({job for s in self.stretches for job in (*s.sim, *s.real)})
        head = ["stretch (s)", *(f"{j} sim / real" for j in jobs), "same",
                "settled after (s) sim / real", "CPU % sim / real"]
        rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for s in self.stretches:
            cells = [f"{s.start:g}–{s.end:g}",
                     *(f"{s.sim.get(j, 0)} / {s.real.get(j, 0)}" for j in jobs),
                     "yes" if s.same else ("as determined" if s.determined else "**no**"),
                     f"{s.sim_settle_s:.0f} / {s.real_settle_s:.0f}",
                     f"{s.sim_util_pct:.1f} / {s.real_util_pct:.1f}"]
            rows.append("| " + " | ".join(cells) + " |")
        rows.append(f"\nCPU utilisation over the run: simulated {self.sim_util_pct:.1f} %, "
                    f"real {self.real_util_pct:.1f} % (difference {self.util_diff_pct:+.1f} "
                    "points)")
        return "\n".join(rows)


def event_times(scenario: Scenario) -> list[float]:
    """Every instant something is submitted, deleted or rescaled, within the run."""
    times = set()
    for plan in expand_jobs(scenario):
        times.add(plan.submit_at)
        if plan.delete_at is not None:
            times.add(plan.delete_at)
    for workload in scenario.workloads:
        times.update(step.at for step in workload.schedule)
    return sorted(t for t in times if t < scenario.duration_s)


def _rows(timeline: Timeline, start: float, end: float) -> list[int]:
    return [i for i, t in enumerate(timeline.times) if start <= t < end]


def _allocation(timeline: Timeline, row: int) -> dict[str, int]:
    return {job: series.trainers_running[row] for job, series in timeline.jobs.items()
            if series.present[row]}


def _settle_s(timeline: Timeline, rows: list[int], start: float) -> float:
    """Seconds from `start` to the last sample of the stretch whose allocation differs from
    the sample before it (the one before the stretch included: a change at `start` is 0 s)."""
    last = start
    for row in rows:
        if row > 0 and _allocation(timeline, row) != _allocation(timeline, row - 1):
            last = timeline.times[row]
    return last - start


def compare(scenario: Scenario, sim: Timeline, real: Timeline,
            others: list[Timeline] | None = None) -> Comparison:
    """Both timelines of `scenario`, sampled on the same grid, stretch by stretch;
    `others`: the simulation under more seeds (for `Stretch.determined`)."""
    events = event_times(scenario)
    bounds = [*events, scenario.duration_s + scenario.sample_interval_s]
    stretches = []
    for start, end in pairwise(bounds):
        sim_rows, real_rows = _rows(sim, start, end), _rows(real, start, end)
        if not sim_rows or not real_rows:
            continue
        stretches.append(Stretch(
            start=start, end=min(end, scenario.duration_s),
            sim=_allocation(sim, sim_rows[-1]), real=_allocation(real, real_rows[-1]),
            sim_settle_s=_settle_s(sim, sim_rows, start),
            real_settle_s=_settle_s(real, real_rows, start),
            sim_util_pct=mean_utilization(sim, start, end - 1e-9) or 0.0,
            real_util_pct=mean_utilization(real, start, end - 1e-9) or 0.0,
            others=tuple(_allocation(other, _rows(other, start, end)[-1])
                         for other in others or [])))
    until = scenario.measure.utilization_until_s
    return Comparison(sim_util_pct=mean_utilization(sim, 0.0, until) or 0.0,
                      real_util_pct=mean_utilization(real, 0.0, until) or 0.0,
                      stretches=stretches)
