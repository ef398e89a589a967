"""A lower bound on the mean job completion time (JCT) any policy could reach.

A job with work cannot finish sooner than if it had the cluster to itself from the
moment it is submitted: its first trainers contribute only after the join cost
(`sim/work.py`), and then it runs at most at its curve's peak over [min, max]
trainers. The mean over jobs of ``join_cost_s + samples / peak`` is therefore a
bound no policy, placement or ordering can beat; contention only adds to it. It
says how much room a policy has: on `mixed-scaling` it is what a 10x larger
cluster reaches under any policy (docs/performance.md).

A job with ``noise_scale`` (`sim/noisy_work.py`) progresses at goodput, throughput
times statistical efficiency, and its φ rises with its progress: its bound is the
integral over its progress of the work at the best goodput over trainer counts and
(``adapt_batch``) batches, φ taken at the end of each of ``_SLICES`` slices of its
progress (goodput only rises with φ at batches from the initial one up, so that
under-states the time: still a bound). With ``adapt_batch=False`` the batch is the
declared per-trainer batch times the trainers, what a policy that does not adapt
batches can best do.

Constraints: a job can never run more trainers than fit, alone, on the node groups
its tolerations, nodeSelector and required node affinity admit (whole trainers per
node beside the per-node background pods), nor more than each namespace quota that
counts its trainers admits; its range is capped there (never below its min), so the
bound stays one no policy can beat.

Only compact-form jobs with work are counted (a full manifest gives None).
"""

from __future__ import annotations

from statistics import fmean

from edl.sim.bound import (
    allocatable_of,
    constraints_for,
    group_facts,
    pod_shape,
    quota_amount,
    quota_cost,
)
from edl.sim.noisy_work import NoiseRamp
from edl.sim.scenario import JobPlan, Scenario, expand_jobs
from edl.sim.work_spec import Work
from edl.throughput.batch import BatchLimits, best_batch, fixed_goodput

_SLICES = 200

__all__ = ["jct_lower_bounds", "mean_jct_lower_bound"]


def _noisy_seconds(plan: JobPlan, work: Work, low: int, high: int, adapt_batch: bool) -> float:
    """Seconds of a noise-limited job's work at its best goodput, slice by slice."""
    assert work.noise_scale is not None and work.initial_batch is not None
    curve = work.throughput.curve()
    start = plan.start_trainers or low
    limits = BatchLimits(work.initial_batch, start, max(work.initial_batch, work.max_batch or 0))
    ramp = NoiseRamp(work.noise_scale.start, work.noise_scale.end)
    seconds = 0.0
    for index in range(_SLICES):
        phi = ramp.at((index + 1) / _SLICES)
        if adapt_batch:
            best = max(best_batch(curve, n, limits, phi)[1] for n in range(low, high + 1))
        else:
            best = max(fixed_goodput(curve, n, limits, phi) for n in range(low, high + 1))
        if best <= 0:
            return float("inf")
        seconds += work.total_samples / _SLICES / best
    return seconds


def _most_trainers(scenario: Scenario, plan: JobPlan) -> int:
    """The most trainers of the job that fit, alone, where it may run and its quotas."""
    group = plan.group
    assert group.trainer is not None
    want = pod_shape(group.trainer.resources)
    constraints = constraints_for(group.scheduling)
    background = [0, 0, 0]
    for pods in scenario.cluster.background_pods:
        if pods.per_node:
            shape = pod_shape(pods.resources)
            background = [background[d] + shape[d] for d in range(3)]
    most = 0
    for node_group in scenario.cluster.node_groups:
        if constraints.blocker(group_facts(node_group)):
            continue
        room = allocatable_of(node_group)
        fits = min((max(0, room[d] - background[d]) // want[d] for d in range(3) if want[d] > 0),
                   default=group.trainer.max)
        most += node_group.count * fits
    priority_class = group.scheduling.priority_class if group.scheduling else None
    for quota in scenario.quotas:
        scoped = quota.priority_classes
        if quota.namespace != group.namespace or (
                scoped is not None and priority_class not in scoped):
            continue
        for key, hard in quota.hard.items():
            cost, amount = quota_cost(key, want), quota_amount(key, str(hard))
            if cost and amount is not None:
                most = min(most, amount // cost)
    return most


def jct_lower_bounds(scenario: Scenario, adapt_batch: bool = True) -> dict[str, float] | None:
    """Per job with work: its JCT on an otherwise empty, unbounded cluster."""
    bounds: dict[str, float] = {}
    for plan in expand_jobs(scenario):
        group = plan.group
        if group.work is None:
            continue
        if group.trainer is None:
            return None
        work, low = group.work, group.trainer.min
        high = max(low, min(group.trainer.max, _most_trainers(scenario, plan)))
        if work.noise_scale is not None:
            seconds = _noisy_seconds(plan, work, low, high, adapt_batch)
            if seconds == float("inf"):
                return None
            bounds[plan.name] = work.join_cost_s + seconds
            continue
        curve = work.throughput.curve()
        peak = max(curve.rate(n) for n in range(low, high + 1))
        if peak <= 0:
            return None
        bounds[plan.name] = work.join_cost_s + work.total_samples / peak
    return bounds


def mean_jct_lower_bound(scenario: Scenario, adapt_batch: bool = True) -> float | None:
    """The mean of `jct_lower_bounds` (None: no job with work, or one not modelled)."""
    bounds = jct_lower_bounds(scenario, adapt_batch)
    return fmean(bounds.values()) if bounds else None
