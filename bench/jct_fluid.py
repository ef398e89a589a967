"""How much mean JCT could any allocation rule win? A fluid model of a scenario's jobs.

Issue 14 asks `goodput` for a mean JCT of 0.75 x `default`'s on `mixed-scaling`. This
bench says what allocation *rules* can reach there when everything the simulator
charges for is taken away: no pod start-up, no join cost, exact curves, no packing
(CPU pooled over the cluster, within max_load_desired, after background pods, each
present job's master and pservers and the services' desired replicas). Every 5 s the
trainer CPU is divided among the present jobs (each at least its min, at most its
max) by one rule, and each job advances at its curve's rate. Rules:

* ``fair-fulfillment``: water-filled by fulfillment (n - min) / (max - min), what
  `default`'s shares compute;
* ``fair-count``: water-filled by trainer count;
* ``log-speedup``: greedy on log X(n+1)/X(n) per CPU (`goodput`'s objective);
* ``samples-over-left``: greedy on (X(n+1) - X(n)) / samples left (SRPT-like);
* ``log-over-sqrt-left``: greedy on log X(n+1)/X(n) / sqrt(time left).

It also prints the bound of `edl.sim.jct_bound` (each job alone at its peak). A
model, not the simulator: its figures rank rules; they are not edl's JCTs.

Jobs with ``noise_scale`` (issue 22) progress at goodput: every rule runs twice, once
with each job's batch the declared per-trainer batch times its trainers ("fixed
batch", what `default` does) and once at the best batch for its trainers and current
φ ("adapted batch"); the rules then see those goodput curves instead of throughput.
Usage: ``python bench/jct_fluid.py [SCENARIO ...]`` (default: mixed-scaling).
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import fmean

from edl.api.quantity import cpu_milli
from edl.sim.jct_bound import mean_jct_lower_bound
from edl.sim.noisy_work import NoiseRamp
from edl.sim.scenario import Scenario, expand_jobs, load_scenario
from edl.throughput.batch import BatchLimits, GoodputCurve, fixed_goodput
from edl.throughput.curve import Curve

STEP_S = 5.0


@dataclass
class _Job:
    name: str
    submit: float
    low: int
    high: int
    cpu: int  # one trainer's CPU (milli)
    overhead: int  # master + pservers (milli)
    curve: Curve  # what the rules see: throughput, or goodput at the job's progress
    left: float
    done_at: float | None = None
    throughput: Curve | None = None  # noise-limited jobs: the true throughput curve
    limits: BatchLimits | None = None
    ramp: NoiseRamp | None = None
    total: float = 0.0


@dataclass(frozen=True)
class _Fixed:
    """Goodput of a job that keeps its per-trainer batch, at one φ."""

    throughput: Curve
    limits: BatchLimits
    phi: float

    def rate(self, n: int) -> float:
        return fixed_goodput(self.throughput, n, self.limits, self.phi)

    def describe(self) -> str:
        return "fixed-batch goodput"


def _refresh(job: _Job, adapt: bool) -> None:
    """The job's goodput curve at its current φ (noise-limited jobs only)."""
    if job.ramp is None or job.limits is None or job.throughput is None:
        return
    phi = job.ramp.at(1.0 - job.left / job.total)
    job.curve = (GoodputCurve(job.throughput, job.limits, phi) if adapt
                 else _Fixed(job.throughput, job.limits, phi))


Rule = Callable[[list[_Job], int], dict[str, int]]


def _cpu(resources) -> int:
    value = resources.requests.cpu
    return cpu_milli(str(value)) if value is not None else 0


def _jobs(scenario: Scenario) -> list[_Job]:
    out = []
    for plan in expand_jobs(scenario):
        group = plan.group
        if group.work is None or group.trainer is None:
            continue
        overhead = _cpu(group.master.resources) if group.master else 0
        if group.pserver is not None:
            overhead += group.pserver.count * _cpu(group.pserver.resources)
        work = group.work
        job = _Job(plan.name, plan.submit_at, group.trainer.min, group.trainer.max,
                   _cpu(group.trainer.resources), overhead, work.throughput.curve(),
                   work.total_samples, total=work.total_samples)
        if work.noise_scale is not None and work.initial_batch is not None:
            job.throughput = job.curve
            job.limits = BatchLimits(work.initial_batch, plan.start_trainers or job.low,
                                     max(work.initial_batch, work.max_batch or 0))
            job.ramp = NoiseRamp(work.noise_scale.start, work.noise_scale.end)
        out.append(job)
    return out


def _capacity(scenario: Scenario, present: list[_Job], t: float) -> int:
    """Trainer CPU (milli) at time t: max load of the cluster minus everything else."""
    groups = scenario.cluster.node_groups
    total = sum(g.count * cpu_milli(str(g.allocatable.cpu or 0)) for g in groups)
    nodes = sum(g.count for g in groups)
    background = sum(
        _cpu(p.resources) * (nodes if p.per_node else (p.count or 0))
        for p in scenario.cluster.background_pods
    )
    services = 0
    for workload in scenario.workloads:
        steps = [s.replicas for s in workload.schedule if s.at <= t]
        services += (steps[-1] if steps else 0) * _cpu(workload.resources)
    cap = scenario.autoscaler.max_load_desired * total
    return int(cap - background - services - sum(j.overhead for j in present))


def _water_fill(level: Callable[[_Job, int], float]) -> Rule:
    def rule(jobs: list[_Job], budget: int) -> dict[str, int]:
        given = {j.name: j.low for j in jobs}
        budget -= sum(j.low * j.cpu for j in jobs)
        heap = [(level(j, j.low), j.name, i) for i, j in enumerate(jobs) if j.low < j.high]
        heapq.heapify(heap)
        while heap:
            _, name, i = heapq.heappop(heap)
            job = jobs[i]
            if job.cpu > budget:
                continue
            budget -= job.cpu
            given[name] += 1
            if given[name] < job.high:
                heapq.heappush(heap, (level(job, given[name]), name, i))
        return given
    return rule


def _greedy(score: Callable[[_Job, int], float]) -> Rule:
    return _water_fill(lambda job, n: -score(job, n))


def _log_gain(job: _Job, n: int) -> float:
    now, after = job.curve.rate(n), job.curve.rate(n + 1)
    return math.log(after / now) / job.cpu if now > 0 and after > now else 0.0


RULES: dict[str, Rule] = {
    "fair-fulfillment": _water_fill(lambda j, n: (n - j.low) / max(1, j.high - j.low)),
    "fair-count": _water_fill(lambda j, n: n),
    "log-speedup": _greedy(_log_gain),
    "samples-over-left": _greedy(
        lambda j, n: (j.curve.rate(n + 1) - j.curve.rate(n)) / j.cpu / max(j.left, 1.0)
    ),
    "log-over-sqrt-left": _greedy(
        lambda j, n: _log_gain(j, n) / math.sqrt(max(j.left / max(j.curve.rate(n), 1e-9), 1.0))
    ),
}


def run(scenario: Scenario, rule: Rule, adapt: bool = False) -> tuple[float, float]:
    """(mean JCT, makespan) of the scenario's jobs with work under ``rule``; ``adapt``:
    noise-limited jobs run at their best batch (else at their declared per-trainer one)."""
    jobs = _jobs(scenario)
    t = 0.0
    while any(j.done_at is None for j in jobs):
        present = [j for j in jobs if j.submit <= t and j.done_at is None]
        for job in present:
            _refresh(job, adapt)
        if present:
            given = rule(present, _capacity(scenario, present, t))
            for job in present:
                rate = job.curve.rate(given[job.name])
                if rate * STEP_S >= job.left:
                    job.done_at = t + job.left / rate
                    job.left = 0.0
                else:
                    job.left -= rate * STEP_S
        t += STEP_S
        if t > 1e7:
            raise RuntimeError("jobs never finish: min trainers do not fit")
    return fmean(j.done_at - j.submit for j in jobs), max(j.done_at for j in jobs)


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    for name in argv or ["mixed-scaling"]:
        scenario = load_scenario(name)
        print(f"\n**{scenario.name}** (fluid model, {STEP_S:.0f} s steps)\n")
        noisy = any(j.ramp is not None for j in _jobs(scenario))
        print("| rule | batch | mean JCT (s) | / fair-fulfillment | makespan (s) |")
        print("|---|---|---:|---:|---:|")
        baseline = None
        for adapt in (False, True) if noisy else (False,):
            for rule_name, rule in RULES.items():
                jct, makespan = run(scenario, rule, adapt)
                baseline = baseline or jct
                batch = "adapted" if adapt else "fixed"
                print(f"| {rule_name} | {batch} | {jct:.0f} | {jct / baseline:.2f} "
                      f"| {makespan:.0f} |", flush=True)
        bound = mean_jct_lower_bound(scenario)
        if noisy:
            fixed = mean_jct_lower_bound(scenario, adapt_batch=False)
            print(f"\nedl.sim.jct_bound (with join costs): adapted batch {bound:.0f} s, "
                  f"fixed batch {fixed:.0f} s")
        else:
            jobs = _jobs(scenario)
            alone = fmean(
                j.left / max(j.curve.rate(n) for n in range(j.low, j.high + 1)) for j in jobs
            )
            print(f"| each job alone at its peak | | {alone:.0f} | {alone / baseline:.2f} | |")
            print(f"\nedl.sim.jct_bound (with join costs): {bound:.0f} s")
    print(f"bench wall time {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
