"""Fair shares: water-filling a CPU/memory/GPU budget over jobs by fulfillment.

Every job first gets its min-instance (an entitlement, even when the budget
cannot hold it). Then the level f in [0, 1] rises for all jobs together: a job
at level f holds min + floor(f x (max - min)) trainers. When the next unit of
some job no longer fits the remaining budget that job is frozen and the level
keeps rising for the others (smaller trainers may still fit). Ties at a level
go to jobs in the order given (the caller sorts by namespace/name), so equal
jobs end within one trainer of each other.

Pools: a job's trainers can only use the nodes its shape fits on. Each pool is a
set of jobs and the room those jobs can use together (e.g. the GPU nodes for the
GPU jobs; the 64-core nodes for jobs whose trainers fit only there); every pool's
budget must hold its members' additions, besides the whole budget holding all.

Cost: a bisection on the level per freeze round, vectorised with numpy,
independent of the number of trainers; a round also freezes every job whose next
unit no longer fits what is left (it never will), so a saturated pool freezes its
members at once: 1,000 jobs x 23 pools take 4 rounds, not 98.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Demand", "Limit", "fair_shares"]

_EPSILON = 1e-9
_BISECTIONS = 50


@dataclass(frozen=True, slots=True)
class Demand:
    """One job for water-filling: its range and the resources of one trainer."""

    min_instance: int
    max_instance: int
    cpu: int
    memory: int
    gpu: int


Pool = tuple[Sequence[bool], tuple[int, int, int]]  # (members, budget: cpu, memory, gpu)


Limit = tuple[Sequence[int], int]  # (what one trainer of each job costs, budget)


def fair_shares(
    jobs: Sequence[Demand], cpu: int, memory: int, gpu: int, pools: Sequence[Pool] = (),
    limits: Sequence[Limit] = (),
) -> list[int]:
    """Trainer counts per job within the budget (cpu milli, memory mega, GPUs) beyond mins.

    The budget is what trainers of these jobs may use in total, mins included; each
    pool's budget is what its members may use together, mins included; each limit
    (a namespace quota's resource) bounds its per-trainer costs the same way.
    """
    if not jobs:
        return []
    lows = np.array([j.min_instance for j in jobs], dtype=np.int64)
    ranges = np.array([j.max_instance - j.min_instance for j in jobs], dtype=np.int64)
    # per-trainer cost, one row per resource: cpu, memory, gpu
    cost = np.array(
        [[j.cpu for j in jobs], [j.memory for j in jobs], [j.gpu for j in jobs]], dtype=np.int64
    )
    shares = lows.copy()
    # one row per pool, the whole budget first: members (bool) and what is left (3)
    members = np.array([[True] * len(jobs), *(list(m) for m, _ in pools)], dtype=bool)
    budgets = np.array([[cpu, memory, gpu], *(list(b) for _, b in pools)], dtype=np.int64)
    # one row per (pool, resource): what each job's trainer costs that pool
    weights = (members[:, None, :] * cost[None, :, :]).reshape(-1, len(jobs))
    if limits:
        extra_rows = np.array([list(costs) for costs, _ in limits], dtype=np.int64)
        weights = np.vstack([weights, extra_rows])
        budgets_flat = np.concatenate(
            [budgets.reshape(-1), np.array([b for _, b in limits], dtype=np.int64)])
    else:
        budgets_flat = budgets.reshape(-1)
    left = budgets_flat - weights @ lows
    # a (pool, resource) row no member uses can never bind: leave it out of the loop
    used_rows = weights.any(axis=1)
    weights, left = weights[used_rows], left[used_rows]
    active = ranges > 0
    safe_ranges = np.where(ranges > 0, ranges, 1)
    # Distinct levels k/r differ by at least 1/max_range^2: bisect no finer than that.
    span = int(ranges.max())
    bisections = min(_BISECTIONS, 2 * span.bit_length() + 4)

    for _ in range(len(jobs) + 2):
        if not active.any():
            break
        # bisection: the highest level at which every active job's additions fit together
        low, high = 0.0, 1.0
        for _ in range(bisections):
            mid = (low + high) / 2
            extra = np.maximum(
                lows + np.floor(mid * ranges + _EPSILON).astype(np.int64) - shares, 0
            )
            extra[~active] = 0
            use = weights @ extra
            if bool(np.all((use <= left) | (use == 0))):
                low = mid
            else:
                high = mid
        extra = np.maximum(lows + np.floor(low * ranges + _EPSILON).astype(np.int64) - shares, 0)
        extra[~active] = 0
        shares += extra
        left -= weights @ extra
        # the jobs whose next unit lies at the level where the bisection failed: one unit
        # each, lowest next fulfillment first; a unit that does not fit freezes its job.
        # At least one of them cannot fit, so every round freezes a job.
        next_level = (shares + 1 - lows) / safe_ranges
        edge = np.flatnonzero(active & (next_level <= high + _EPSILON))
        if edge.size == 0:
            break
        levels = next_level.tolist()
        _one_unit_each(sorted(edge.tolist(), key=lambda i: (levels[i], i)), weights, left,
                       shares, active)
        active &= shares < lows + ranges
        # what is left only shrinks: a job whose next unit does not fit now never will
        active &= ((weights == 0) | (weights <= left[:, None])).all(axis=0)
    return shares.tolist()


def _one_unit_each(
    order: list[int], weights: np.ndarray, left: np.ndarray, shares: np.ndarray,
    active: np.ndarray,
) -> None:
    """In `order`, each job takes one unit if it fits what is left (every row its unit
    uses), else it freezes. In Python over each unit's nonzero rows: a job uses a few of
    the (pool, resource) rows, and numpy per job cost more than the arithmetic."""
    columns = weights[:, order]
    rows, cols = np.nonzero(columns.T)  # sorted by column: each job's rows together
    amounts = columns.T[rows, cols].tolist()
    starts = np.searchsorted(rows, np.arange(len(order) + 1)).tolist()
    cols_list = cols.tolist()
    room = left.tolist()
    for k, i in enumerate(order):
        uses = range(starts[k], starts[k + 1])
        if all(amounts[u] <= room[cols_list[u]] for u in uses):
            shares[i] += 1
            for u in uses:
                room[cols_list[u]] -= amounts[u]
        else:
            active[i] = False
    left[:] = room
