"""hypothesis properties of the goodput allocation math (edl.policy.marginal)."""

from __future__ import annotations

import dataclasses

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from edl.policy.marginal import GoodputParams, Want, allocate, bounds, pays_back, trainer_value
from edl.throughput.curve import PointsCurve, UslCurve

UNITS = [(1000, 1000, 0), (2000, 4000, 0), (4000, 8000, 1)]


@st.composite
def curves(draw):
    if draw(st.booleans()):
        return UslCurve(
            draw(st.floats(1, 200)),
            draw(st.floats(0, 0.5)),
            draw(st.sampled_from([0.0, 1e-4, 1e-3, 1e-2])),
        )
    count = draw(st.integers(1, 5))
    ns = sorted(draw(st.sets(st.integers(1, 40), min_size=count, max_size=count)))
    xs = sorted(draw(st.lists(st.floats(1, 500), min_size=count, max_size=count)))
    return PointsCurve(tuple(zip(ns, xs, strict=True)))


@st.composite
def wants(draw, index: int = 0):
    low = draw(st.integers(1, 4))
    high = draw(st.integers(low, 40))
    held = draw(st.integers(low, high))
    return Want(
        key=("ns", f"job{index}"),
        min_instance=low,
        max_instance=high,
        current=held,
        held=held,
        unit=draw(st.sampled_from(UNITS)),
        curve=draw(curves()),
        fair=draw(st.integers(low, high)),
        join_cost_s=draw(st.sampled_from([0.0, 10.0, 30.0, 120.0])),
        resize_pause_s=draw(st.sampled_from([0.0, 1.0, 18.0])),
        remaining_samples=draw(st.one_of(st.none(), st.floats(0, 1e6))),
        grown_recently=draw(st.booleans()),
        shrunk_recently=draw(st.booleans()),
    )


@st.composite
def problems(draw):
    jobs = [draw(wants(i)) for i in range(draw(st.integers(1, 6)))]
    budget = (draw(st.integers(0, 200_000)), draw(st.integers(0, 400_000)), draw(st.integers(0, 8)))
    params = GoodputParams(
        fairness=draw(st.sampled_from([0.0, 0.5, 1.0])),
        horizon_s=draw(st.sampled_from([60.0, 600.0, 3600.0])),
        deadband=draw(st.sampled_from([0.0, 0.05])),
    )
    return jobs, budget, params


def _used(jobs, targets) -> list[int]:
    return [sum(j.unit[d] * t for j, t in zip(jobs, targets, strict=True)) for d in range(3)]


@settings(max_examples=300, deadline=None)
@given(problems())
def test_targets_within_min_max_and_bounds(problem) -> None:
    jobs, budget, params = problem
    for job, allocation in zip(jobs, allocate(jobs, budget, params), strict=True):
        assert job.min_instance <= allocation.target <= job.max_instance
        assert allocation.floor <= allocation.target <= allocation.ceiling


@settings(max_examples=300, deadline=None)
@given(problems())
def test_no_overcommit_when_the_floors_fit(problem) -> None:
    """Floors (min, fairness, cooldown) are entitlements; everything else fits the budget."""
    jobs, budget, params = problem
    allocations = allocate(jobs, budget, params)
    floors = _used(jobs, [a.floor for a in allocations])
    used = _used(jobs, [a.target for a in allocations])
    for d in range(3):
        assert used[d] <= max(budget[d], floors[d])
    if all(floors[d] <= budget[d] for d in range(3)):
        assert all(used[d] <= budget[d] for d in range(3))


@settings(max_examples=300, deadline=None)
@given(problems())
def test_every_new_trainer_pays_back_its_join_cost(problem) -> None:
    jobs, budget, params = problem
    for job, allocation in zip(jobs, allocate(jobs, budget, params), strict=True):
        start = max(job.held, allocation.floor)
        for n in range(start, allocation.target):
            assert pays_back(job, n, params.horizon_s), (job, n)


@settings(max_examples=300, deadline=None)
@given(problems())
def test_cooldowns_hold(problem) -> None:
    jobs, budget, params = problem
    for job, allocation in zip(jobs, allocate(jobs, budget, params), strict=True):
        held = max(job.min_instance, min(job.held, job.max_instance))
        if job.grown_recently:
            assert allocation.target >= held
        if job.shrunk_recently:  # neither grown back nor shrunk on within the cooldown
            assert allocation.target == held


@settings(max_examples=200, deadline=None)
@given(wants(0), st.floats(1.05, 4.0), st.integers(0, 120_000))
def test_monotone_in_marginal_gain(job, boost, cpu) -> None:
    """Two otherwise equal jobs: the one whose every marginal gain is larger never gets less."""
    job = dataclasses.replace(
        job, join_cost_s=0.0, grown_recently=False, shrunk_recently=False,
        curve=UslCurve(100.0, 0.2), unit=(1000, 1000, 0),
    )
    steeper = dataclasses.replace(job, key=("ns", "steep"), curve=UslCurve(100.0, 0.2 / boost))
    flatter = dataclasses.replace(job, key=("ns", "flat"))
    first, second = allocate([steeper, flatter], (cpu, 10**9, 0), GoodputParams(deadband=0.0))
    assert first.target >= second.target


def test_flat_job_yields_to_scaling_job() -> None:
    """Flat beyond 8 vs scaling to 60, 40 trainers of room: the scaling job gets most."""
    flat = Want(("ns", "flat"), 1, 40, 1, 1, (1000, 1000, 0),
                PointsCurve(((1, 40.0), (4, 150.0), (8, 260.0), (16, 270.0))), fair=20)
    wide = Want(("ns", "wide"), 1, 60, 1, 1, (1000, 1000, 0), UslCurve(20.0, 0.002), fair=20)
    flat_a, wide_a = allocate([flat, wide], (40_000, 10**9, 0), GoodputParams(fairness=0.0))
    assert flat_a.target <= 10
    assert wide_a.target >= 30


def test_payback_stops_growth_near_the_end_of_the_work() -> None:
    job = Want(("ns", "j"), 1, 20, 4, 4, (1000, 1000, 0), UslCurve(100.0), fair=4,
               join_cost_s=30.0, remaining_samples=400 * 20.0)  # 20 s left at 4 trainers
    assert not pays_back(job, 4, 600.0)
    assert allocate([job], (20_000, 10**9, 0), GoodputParams(fairness=0.0))[0].target == 4
    longer = dataclasses.replace(job, remaining_samples=None)
    assert pays_back(longer, 4, 600.0)


def test_a_resize_pause_is_paid_by_the_whole_world() -> None:
    """A collective job stops every trainer for a resize: a restart's 18 s pause makes a
    small gain not worth it where a live re-formation's 1 s does not."""
    job = Want(("ns", "j"), 1, 9, 8, 8, (1000, 1000, 0), UslCurve(100.0, 0.05), fair=8,
               remaining_samples=None)
    live = dataclasses.replace(job, resize_pause_s=1.0)
    restart = dataclasses.replace(job, resize_pause_s=18.0)
    horizon = 60.0
    assert pays_back(job, 8, horizon) and pays_back(live, 8, horizon)
    assert not pays_back(restart, 8, horizon)


def test_a_pause_is_paid_once_by_the_whole_step() -> None:
    """One restart for one more trainer does not pay; the same restart for a step to
    20 trainers does, so the first trainer of that step is given (issue 32: the pause
    was charged to every trainer of a step, as if each were a resize of its own)."""
    one = Want(("ns", "j"), 1, 9, 8, 8, (1000, 1000, 0), UslCurve(100.0, 0.05), fair=8,
               resize_pause_s=18.0)
    many = dataclasses.replace(one, max_instance=20)
    assert not pays_back(one, 8, 60.0)
    assert pays_back(many, 8, 60.0)
    assert allocate([many], (20_000, 10**9, 0), GoodputParams(fairness=0.0))[0].target > 9


@given(wants(), st.integers(1, 39), st.floats(0, 100), st.floats(0, 100))
def test_a_dearer_pause_never_makes_a_growth_pay(want, n, cheap, dear) -> None:
    low, high = sorted((cheap, dear))
    if pays_back(dataclasses.replace(want, resize_pause_s=high), n, 600.0):
        assert pays_back(dataclasses.replace(want, resize_pause_s=low), n, 600.0)


def test_fairness_floor_and_min() -> None:
    job = Want(("ns", "j"), 2, 20, 2, 2, (1000, 1000, 0), UslCurve(1.0, 1.0), fair=10)
    assert bounds(job, GoodputParams(fairness=0.5)) == (5, 20)
    assert bounds(job, GoodputParams(fairness=0.0)) == (2, 20)
    shrunk = dataclasses.replace(job, shrunk_recently=True, held=3)
    assert bounds(shrunk, GoodputParams(fairness=0.5)) == (3, 3)


@given(st.integers(0, 10))
def test_nothing_is_bought_beyond_a_peak(extra) -> None:
    assume(extra >= 0)
    peaked = UslCurve(10.0, 0.0, 0.05)  # peaks near 4.5 trainers
    job = Want(("ns", "j"), 1, 30, 1, 1, (1000, 1000, 0), peaked, fair=1)
    allocation = allocate([job], (10**6, 10**9, 0), GoodputParams(fairness=0.0))[0]
    assert allocation.target <= 5


@settings(max_examples=300, deadline=None)
@given(wants(), st.integers(0, 3), st.integers(0, 45),
       st.tuples(st.integers(0, 200_000), st.integers(0, 400_000), st.integers(0, 8)),
       st.sampled_from([-1.0, 0.0, 0.5, 1.0]), st.sampled_from(["min", "fair"]))
def test_a_trainers_value_is_never_nan(want, low, n, budget, power, baseline) -> None:
    """Shedding and rebalancing order trainers by this value in heaps, where a NaN orders
    nothing; a job with no throughput at n - 1 and n (min-instance 0 on a curve through
    the origin) or a budget with none of what it needs gave NaN."""
    want = dataclasses.replace(want, min_instance=min(low, want.min_instance))
    value = trainer_value(want, n, budget, GoodputParams(power=power, baseline=baseline))
    assert value == value, (want, n, budget, power, baseline)
