"""Goodput allocation: trainers where they add the most speed-up per unit of resource.

Pure arithmetic over `Want`s (one per elastic job) and a resource budget, used by the
`goodput` policy for its shares. For each job:

* **floor** — ``max(min, floor(fairness x fair share))``: no job drops below min, and
  every job keeps a tunable part of its fair (water-filled) share whatever its curve;
* **cooldown** — a job grown within ``cooldown_s`` keeps what it holds (its floor
  rises to it); a job shrunk within ``cooldown_s`` keeps exactly what it holds (not
  grown back, nor shrunk again by the allocation). A service or a job below min
  still gets room: the policy's earlier steps shrink for those, not this allocation;
* then, one trainer at a time, the unit with the highest **normalised marginal gain
  per unit of resource** is given while the budget holds it: gain = U(s(n+1)) − U(s(n))
  with s(n) = X(n) / X(min) the job's speed-up over its own minimum and U Pollux's
  generalised mean utility (p = 0 by default: U = log, so the gain is log X(n+1)/X(n),
  the job's *relative* throughput gain, whatever its size or baseline), divided by
  the unit's dominant share of the budget. A trainer the job already holds scores
  ``1 + incumbency`` times its gain (moving a trainer is not free);
* **payback** — a trainer the job does not hold yet must join first (``join_cost_s``
  of its time producing nothing), and a collective job stops its whole world for
  ``resize_pause_s`` (a restart, or a live re-formation). It is given only if the
  samples it adds within the horizon pay that back: its own join,
  ΔX · (T − c − p) ≥ c · X(n+1)/(n+1), and, once per resize, the pause: some step
  from the h trainers the job holds through it to m ≥ n+1 repays every join and the
  pause, (X(m) − X(h)) · (T − c − p) ≥ c (m − h) X(m)/m + p · X(h), with T =
  min(horizon, the job's remaining time at its current rate), a join valued at the
  job's own per-trainer rate and the pause at its whole current rate. A nearly flat
  job (ΔX small), one about to finish (T small) or one whose resizes are dear (p) is
  not grown;
* **deadband** — a resize that would change the job's throughput by less than
  ``deadband`` (10 %) is not made.

Greedy by marginal gain is optimal for concave curves (diminishing returns), which
the USL is up to its peak; a gain ≤ 0 (beyond the peak) is never bought.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from edl.throughput.curve import Curve

__all__ = ["Allocation", "GoodputParams", "Want", "allocate", "pays_back", "trainer_value"]

Vector = tuple[int, int, int]  # cpu milli, memory mega, gpu
_MIN_LEFT_S = 30.0


@dataclass(frozen=True, slots=True)
class GoodputParams:
    """Tunables: ``fairness`` share of the fair share every job keeps; ``horizon_s`` a grow
    must pay back within; ``cooldown_s`` between opposite resizes; ``incumbency`` bonus;
    ``deadband``: a resize that changes the job's speed by less than this fraction is
    not made (a noisy fit must not move trainers back and forth); ``power``: the
    generalised-mean exponent p of the objective (1: sum of speed-ups, 0: sum of their
    logs — proportional fairness, -1: favours slow jobs more); ``baseline``: what a
    speed-up is relative to ("min": min-instance, "fair": the fair share) — at p = 0
    it cancels out; ``urgency``: weight jobs by (horizon / time left) ** urgency.
    ``efficiency``: value a job that adapts its batch by goodput (throughput x
    statistical efficiency; off: throughput alone, at its best batch); ``adapt_batch``:
    choose such a job's batch (off: it keeps its declared per-trainer batch and is
    valued by that batch's goodput); ``batch_gain``: a job's batch changes only when
    the new one is predicted this much faster. ``pause_share``: a
    job whose resize pause is known (measured, or its collective mode's default) is left
    alone after a resize long enough that pauses take at most this share of its time,
    within [``min_cooldown_s``, ``cooldown_s``] (`edl.throughput.pause.cooldown_s`); a
    job whose pause is unknown gets ``cooldown_s``.

    Defaults chosen on generated scenarios (bench/goodput.py, seeds 2000-2003), not on
    the ones reported, but ``min_cooldown_s``: measured on `mixed-scaling` with live
    pauses (it binds only live jobs) and checked on generated scenarios
    (docs/performance.md)."""

    fairness: float = 0.5
    horizon_s: float = 600.0
    cooldown_s: float = 120.0
    incumbency: float = 0.2
    urgency: float = 0.0
    baseline: str = "min"
    power: float = 0.0
    deadband: float = 0.1
    efficiency: bool = True
    adapt_batch: bool = True
    batch_gain: float = 0.05
    pause_share: float = 0.02
    min_cooldown_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Want:
    """One job for the allocation."""

    key: tuple[str, str]
    min_instance: int
    max_instance: int
    current: int  # target before the allocation (after shrinks the policy must make)
    held: int  # trainers the job holds or was already given (beyond them a join is paid)
    unit: Vector  # resources of one trainer
    curve: Curve
    fair: int  # water-filled fair share
    join_cost_s: float = 0.0
    resize_pause_s: float = 0.0
    remaining_samples: float | None = None
    grown_recently: bool = False
    shrunk_recently: bool = False


@dataclass(frozen=True, slots=True)
class Allocation:
    """The trainers given to a job, and the bounds and rule that ended its allocation."""

    target: int
    floor: int
    ceiling: int
    stop: str  # "max", "ceiling", "budget", "no gain", "payback", or "" (not elastic)


def pays_back(want: Want, n: int, horizon_s: float) -> bool:
    """Does growing from ``n`` to ``n+1`` trainers repay the new trainer's join time,
    and the resize's pause? The pause is paid once per resize, so it is charged to the
    whole step from what the job holds: the trainer is worth its pause if a step through
    it (to n+1 or further, up to max) repays the pause and every join on the way."""
    cost, pause = want.join_cost_s, want.resize_pause_s
    if cost <= 0 and pause <= 0:
        return True
    curve = want.curve
    now, after = curve.rate(n), curve.rate(n + 1)
    if after - now <= 0:
        return False
    window = horizon_s
    if want.remaining_samples is not None and now > 0:
        window = min(window, want.remaining_samples / now)
    if (after - now) * (window - cost - pause) < cost * after / (n + 1):
        return False  # its own join is not repaid
    if pause <= 0:
        return True
    held = max(want.min_instance, min(n, want.held))
    base = curve.rate(held)
    for m in range(n + 1, want.max_instance + 1):
        rate = curve.rate(m)
        if (rate - base) * (window - cost - pause) >= cost * (m - held) * rate / m + pause * base:
            return True
    return False


def urgency(want: Want, params: GoodputParams) -> float:
    """(horizon / time left at its current size) ** urgency: jobs closer to done weigh more."""
    if params.urgency <= 0 or want.remaining_samples is None:
        return 1.0
    rate = want.curve.rate(max(want.min_instance, want.held))
    if rate <= 0:
        return 1.0
    left = max(_MIN_LEFT_S, want.remaining_samples / rate)
    return (params.horizon_s / left) ** params.urgency


def utility(value: float, power: float) -> float:
    """Pollux's generalised mean: value**p / p (log at p = 0); p < 1 favours slow jobs."""
    if value <= 0:
        return -math.inf if power <= 0 else 0.0
    if power == 0:
        return math.log(value)
    return value**power / power


def speedup(want: Want, n: int, baseline: str = "min") -> float:
    """X(n) over the job's throughput at its baseline: min-instance, or its fair share."""
    count = want.min_instance if baseline == "min" else max(want.min_instance, want.fair)
    base = want.curve.rate(count)
    return want.curve.rate(n) / base if base > 0 else 0.0


def _dominant(unit: Vector, budget: Vector) -> float:
    """The unit's largest share of the budget (DRF's dominant share); inf if it cannot fit."""
    share = 0.0
    for amount, total in zip(unit, budget, strict=True):
        if amount > 0:
            if total <= 0:
                return math.inf
            share = max(share, amount / total)
    return share if share > 0 else 1e-12


def bounds(want: Want, params: GoodputParams) -> tuple[int, int]:
    """(floor, ceiling) of a job's allocation: fairness floor and cooldowns.

    A cooldown after a shrink holds the job at what it holds, even against its fairness
    floor (a resize is not undone within the cooldown, nor made again: a job shrunk in
    several small steps over consecutive ticks pays a resize for each); after a grow,
    it keeps what it holds.
    """
    low, high = want.min_instance, want.max_instance
    held = max(low, min(high, want.held))
    floor = max(low, min(high, int(params.fairness * want.fair + 1e-9)))
    ceiling = held if want.shrunk_recently else high
    if want.grown_recently or want.shrunk_recently:
        floor = max(floor, held)
    return min(floor, ceiling), ceiling


def _deadband(
    wants: Sequence[Want],
    targets: list[int],
    limits: list[tuple[int, int]],
    left: list[int],
    stops: list[str],
    band: float,
) -> None:
    """Undo resizes worth less than ``band`` of the job's speed (grows first: they free room)."""
    if band <= 0:
        return
    order = sorted(range(len(wants)), key=lambda i: targets[i] < wants[i].held)
    for index in order:
        want, target = wants[index], targets[index]
        held = max(want.min_instance, min(want.max_instance, want.held))
        floor, ceiling = limits[index]
        if target == held or not floor <= held <= ceiling:
            continue
        now = want.curve.rate(held)
        if now <= 0 or abs(want.curve.rate(target) - now) >= band * now:
            continue
        extra = held - target
        if extra > 0 and any(want.unit[d] * extra > left[d] for d in range(3) if want.unit[d]):
            continue  # keeping the trainers does not fit the budget
        for d in range(3):
            left[d] -= want.unit[d] * extra
        targets[index] = held
        stops[index] = "deadband"


def trainer_value(want: Want, n: int, budget: Vector, params: GoodputParams) -> float:
    """What the ``n``-th trainer is worth to the job: the allocation's score of the
    step from ``n - 1`` to ``n`` (utility gain x urgency / dominant share); inf at or
    below min-instance (those trainers are not the allocation's to move)."""
    if n <= want.min_instance:
        return math.inf
    dominant = _dominant(want.unit, budget)
    if math.isinf(dominant):
        return 0.0  # the budget has none of what it needs: worth nothing here
    now = utility(speedup(want, n, params.baseline), params.power)
    before = utility(speedup(want, n - 1, params.baseline), params.power)
    # equal utilities (both -inf: a job with no throughput either way) gain nothing;
    # their difference would be NaN, which orders nothing in a heap
    gain = 0.0 if now == before else now - before
    return gain * urgency(want, params) / dominant


def allocate(
    wants: Sequence[Want], budget: Vector, params: GoodputParams = GoodputParams()
) -> list[Allocation]:
    """Trainers per job (in the order given) within ``budget`` (what trainers may use)."""
    limits = [bounds(want, params) for want in wants]
    targets = [floor for floor, _ in limits]
    left = list(budget)
    for want, target in zip(wants, targets, strict=True):
        for d in range(3):
            left[d] -= want.unit[d] * target
    stops = [""] * len(wants)
    heap: list[tuple[float, tuple[str, str], int]] = []

    def push(index: int) -> None:
        want, n = wants[index], targets[index]
        ceiling = limits[index][1]
        if n >= want.max_instance:
            stops[index] = "max"
            return
        if n >= ceiling:
            stops[index] = "ceiling"
            return
        gain = utility(speedup(want, n + 1, params.baseline), params.power) - utility(
            speedup(want, n, params.baseline), params.power
        )
        if gain <= 0:
            stops[index] = "no gain"
            return
        if n + 1 > want.held and not pays_back(want, n, params.horizon_s):
            stops[index] = "payback"
            return
        if n + 1 <= want.held:
            gain *= 1.0 + params.incumbency
        score = gain * weights[index] / _dominant(want.unit, budget)
        heapq.heappush(heap, (-score, want.key, index))

    weights = [urgency(want, params) for want in wants]
    for index in range(len(wants)):
        push(index)
    while heap:
        _, _, index = heapq.heappop(heap)
        unit = wants[index].unit
        if any(unit[d] > 0 and unit[d] > left[d] for d in range(3)):
            stops[index] = "budget"
            continue
        for d in range(3):
            left[d] -= unit[d]
        targets[index] += 1
        push(index)
    _deadband(wants, targets, limits, left, stops, params.deadband)
    return [
        Allocation(target, floor, ceiling, stop)
        for target, (floor, ceiling), stop in zip(targets, limits, stops, strict=True)
    ]
