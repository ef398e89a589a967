"""A lower bound on the mean job completion time (JCT) any policy could reach.

A job with work cannot finish sooner than if it had the cluster to itself from the
moment it is submitted: its first trainers contribute only after the join cost
(`sim/work.py`), and then it runs at most at its curve's peak over [min, max]
trainers. The mean over jobs of ``join_cost_s + samples / peak`` is therefore a
bound no policy, placement or ordering can beat; contention only adds to it. It
says how much room a policy has: on `mixed-scaling` it is what a 10x larger
cluster reaches under any policy (docs/performance.md).

Only compact-form jobs with work are counted (a full manifest gives None).
"""

from __future__ import annotations

from statistics import fmean

from edl.sim.scenario import Scenario, expand_jobs

__all__ = ["jct_lower_bounds", "mean_jct_lower_bound"]


def jct_lower_bounds(scenario: Scenario) -> dict[str, float] | None:
    """Per job with work: its JCT on an otherwise empty, unbounded cluster."""
    bounds: dict[str, float] = {}
    for plan in expand_jobs(scenario):
        group = plan.group
        if group.work is None:
            continue
        if group.trainer is None:
            return None
        curve = group.work.throughput.curve()
        peak = max(curve.rate(n) for n in range(group.trainer.min, group.trainer.max + 1))
        if peak <= 0:
            return None
        bounds[plan.name] = group.work.join_cost_s + group.work.total_samples / peak
    return bounds


def mean_jct_lower_bound(scenario: Scenario) -> float | None:
    """The mean of `jct_lower_bounds` (None: no job with work, or one not modelled)."""
    bounds = jct_lower_bounds(scenario)
    return fmean(bounds.values()) if bounds else None
