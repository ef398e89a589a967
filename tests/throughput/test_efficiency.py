"""Statistical efficiency, AdaScale's gain and the gradient-noise-scale estimator."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edl.throughput.efficiency import NoiseScaleEstimator, adascale_gain, efficiency


def synthetic_steps(
    rng: np.random.Generator, grad: np.ndarray, sigma: float, count: int, per_gradient: int
) -> tuple[float, float]:
    """One step's (L, T): ``count`` gradients, each the mean of ``per_gradient`` samples
    whose gradients are ``grad`` plus N(0, sigma²) noise per coordinate."""
    noise = rng.normal(0.0, sigma / math.sqrt(per_gradient), size=(count, grad.size))
    local = grad[None, :] + noise
    local_sqr = float(np.mean(np.sum(local * local, axis=1)))
    mean = local.mean(axis=0)
    return local_sqr, float(mean @ mean)


def test_efficiency_is_one_at_the_initial_batch_and_falls_beyond() -> None:
    assert efficiency(100.0, 32, 32) == 1.0
    assert efficiency(100.0, 32, 64) == pytest.approx(132 / 164)
    assert efficiency(100.0, 32, 16) > 1.0  # a smaller batch is more sample-efficient
    assert efficiency(None, 32, 4096) == 1.0
    assert efficiency(math.inf, 32, 4096) == 1.0


@given(
    phi=st.floats(1.0, 1e6),
    initial=st.integers(1, 1024),
    batch=st.integers(1, 1 << 16),
)
def test_efficiency_falls_with_the_batch(phi: float, initial: int, batch: int) -> None:
    here = efficiency(phi, initial, batch)
    assert here > 0
    assert efficiency(phi, initial, batch + 1) < here
    assert (here <= 1.0) == (batch >= initial) or here == pytest.approx(1.0)


def test_adascale_gain_bounds() -> None:
    # pure noise: a step at k times the batch goes k times as far; pure signal: no further
    assert adascale_gain(1.0, 0.0, 4.0) == pytest.approx(4.0)
    assert adascale_gain(0.0, 1.0, 4.0) == pytest.approx(1.0)
    assert adascale_gain(1.0, 1.0, 4.0) == pytest.approx(2.0 / 1.25)
    assert adascale_gain(1.0, 0.0, 4.0, adaptive=True) == pytest.approx(2.0)
    assert adascale_gain(1.0, 1.0, 1.0) == pytest.approx(1.0)


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    phi=st.floats(20.0, 2000.0),
    count=st.integers(2, 16),
    ratio=st.floats(0.125, 4.0),
    initial=st.integers(8, 256),
)
def test_estimator_recovers_a_known_noise_scale(
    seed: int, phi: float, count: int, ratio: float, initial: int
) -> None:
    """Gradients of known variance: φ = tr Σ / |G|² within 10 % (any replica count and
    initial batch; a total batch from φ/8 to 4φ, where it is worth measuring: far
    below φ one step's estimate is mostly noise, and the averages' window is fixed)."""
    rng = np.random.default_rng(seed)
    dim = 256
    per_gradient = max(1, round(ratio * phi / count))
    grad = rng.normal(size=dim)
    grad *= 1.0 / np.linalg.norm(grad)  # |G|² = 1
    sigma = math.sqrt(phi / dim)  # tr Σ = dim σ² = φ
    batch = count * per_gradient
    # φ is fixed here, so average over every step (the default window, ~1000 initial
    # batches of samples, follows a φ that changes; it is unbiased, but noisier)
    estimator = NoiseScaleEstimator(smoothing=0.99999)
    for _ in range(4000):
        local, total = synthetic_steps(rng, grad, sigma, count, per_gradient)
        assert estimator.observe(local, total, count, batch / initial)
    estimate = estimator.noise_scale(initial)
    assert estimate is not None and math.isfinite(estimate)
    assert estimate == pytest.approx(phi, rel=0.10)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31), phi=st.floats(20.0, 2000.0), ratio=st.floats(0.25, 4.0))
def test_single_replica_pairs_recover_the_noise_scale(seed: int, phi: float, ratio: float) -> None:
    """One replica: consecutive gradients stand in for two replicas."""
    rng = np.random.default_rng(seed)
    dim = 256
    batch = max(1, round(ratio * phi))
    grad = rng.normal(size=dim)
    grad *= 1.0 / np.linalg.norm(grad)
    sigma = math.sqrt(phi / dim)
    estimator = NoiseScaleEstimator(smoothing=0.99999)
    previous = None
    for _ in range(6000):
        current = grad + rng.normal(0.0, sigma / math.sqrt(batch), size=dim)
        if previous is not None:
            mean = (previous + current) / 2
            estimator.observe_pair(
                float(previous @ previous), float(current @ current), float(mean @ mean), 1.0
            )
        previous = current
    estimate = estimator.noise_scale(batch)
    assert estimate == pytest.approx(phi, rel=0.10)


def test_unusable_steps_are_skipped_and_state_survives_a_round_trip() -> None:
    estimator = NoiseScaleEstimator()
    assert estimator.noise_scale(32) is None
    assert estimator.gain(4.0) == 1.0
    assert not estimator.observe(math.nan, 1.0, 4, 1.0)
    assert not estimator.observe(2.0, math.inf, 4, 1.0)
    assert not estimator.observe(2.0, 1.0, 1, 1.0)
    assert estimator.skipped == 3 and estimator.steps == 0
    assert estimator.observe(2.0, 1.25, 4, 1.0)  # sqr = (5 - 2)/3 = 1, var = 0.75/3
    assert estimator.sqr == pytest.approx(1.0)
    assert estimator.var == pytest.approx(0.25)
    assert estimator.noise_scale(32) == pytest.approx(8.0)
    assert estimator.gain(2.0) == pytest.approx(adascale_gain(0.25, 1.0, 2.0))
    again = NoiseScaleEstimator.from_dict(estimator.to_dict())
    assert again.noise_scale(32) == estimator.noise_scale(32)
    assert again.steps == 1 and again.skipped == 3


def test_switching_estimators_restarts_the_averages() -> None:
    estimator = NoiseScaleEstimator()
    for _ in range(50):
        estimator.observe(2.0, 1.25, 4, 1.0)
    estimator.observe_pair(3.0, 3.0, 2.0, 1.0)  # a different regime: start over
    # sqr = 2*2 - 3 = 1, var = (3 - 2) * 2 = 2: only the new step counts
    assert estimator.sqr == pytest.approx(1.0)
    assert estimator.var == pytest.approx(2.0)
