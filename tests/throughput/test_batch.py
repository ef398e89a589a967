"""The goodput model: throughput against trainers and batch, and the best batch."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edl.throughput.batch import (
    BatchLimits,
    GoodputCurve,
    best_batch,
    fixed_goodput,
    throughput_at,
)
from edl.throughput.curve import Curve, PointsCurve, UslCurve
from edl.throughput.efficiency import efficiency

curves = st.one_of(
    st.builds(
        UslCurve,
        st.floats(1.0, 100.0),
        st.floats(0.0, 0.2),
        st.floats(0.0, 0.01),
    ),
    st.lists(st.floats(1.0, 500.0), min_size=1, max_size=6).map(
        lambda xs: PointsCurve(tuple((2**i, x) for i, x in enumerate(sorted(xs))))
    ),
)


@st.composite
def limits(draw: st.DrawFn) -> BatchLimits:
    trainers = draw(st.integers(1, 8))
    initial = trainers * draw(st.integers(1, 64))
    top = initial * draw(st.integers(1, 32))
    per = draw(st.none() | st.integers(1, 512))
    return BatchLimits(initial, trainers, top, per)


@given(curve=curves, limit=limits(), n=st.integers(1, 64))
def test_the_curve_is_the_throughput_at_the_declared_per_trainer_batch(
    curve: Curve, limit: BatchLimits, n: int
) -> None:
    assert throughput_at(curve, n, limit.fixed(n), limit.base) == pytest.approx(
        curve.rate(n), rel=1e-9, abs=1e-9
    )
    assert fixed_goodput(curve, n, limit, None) == pytest.approx(curve.rate(n), abs=1e-9)


@given(curve=curves, limit=limits(), n=st.integers(1, 64), a=st.floats(0.1, 10.0))
def test_a_larger_per_trainer_batch_never_lowers_throughput(
    curve: Curve, limit: BatchLimits, n: int, a: float
) -> None:
    batch = limit.fixed(n)
    assert throughput_at(curve, n, batch * (1 + a), limit.base) >= throughput_at(
        curve, n, batch, limit.base
    ) * (1 - 1e-12)


@settings(max_examples=60, deadline=None)
@given(
    curve=curves,
    limit=limits(),
    n=st.integers(1, 48),
    phi=st.none() | st.floats(1.0, 1e5),
)
def test_best_batch_is_the_best_in_bounds(
    curve: Curve, limit: BatchLimits, n: int, phi: float | None
) -> None:
    """Brute force over every allowed batch: nothing beats the chosen one."""
    batch, value = best_batch(curve, n, limit, phi)
    low, high = limit.bounds(n)
    assert low <= batch <= high
    step = max(1, (high - low) // 400)
    for other in [*range(low, high + 1, step), high]:
        here = throughput_at(curve, n, other, limit.base) * efficiency(phi, limit.initial, other)
        assert here <= value * (1 + 1e-9) + 1e-12


@given(curve=curves, limit=limits(), n=st.integers(1, 48))
def test_no_noise_limit_is_efficiency_off(curve: Curve, limit: BatchLimits, n: int) -> None:
    assert best_batch(curve, n, limit, math.inf) == best_batch(curve, n, limit, None)
    off = GoodputCurve(curve, limit, None)
    assert GoodputCurve(curve, limit, math.inf).rate(n) == off.rate(n)


def test_a_noisier_gradient_affords_a_larger_batch() -> None:
    curve = UslCurve(20.0, 0.05, 0.0005)
    limit = BatchLimits(64, 2, 4096)
    batches = [best_batch(curve, 16, limit, phi)[0] for phi in (10.0, 300.0, 3000.0, 30000.0)]
    assert batches == sorted(batches) and batches[0] < batches[-1]
    assert best_batch(curve, 16, limit, 1.0)[0] == 64  # low noise: the initial batch
    # one trainer has no overhead: a larger batch only costs efficiency
    assert best_batch(curve, 1, limit, 3000.0)[0] == 64


def test_memory_bounds_the_batch() -> None:
    limit = BatchLimits(64, 2, 4096, per_trainer_max=40)
    assert limit.bounds(4) == (64, 160)
    assert limit.bounds(1) == (40, 40)  # one trainer cannot hold the initial batch
    assert best_batch(UslCurve(20.0, 0.1), 4, limit, None)[0] == 160
    with pytest.raises(ValueError):
        BatchLimits(64, 2, 32)
