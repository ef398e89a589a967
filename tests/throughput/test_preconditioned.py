"""The preconditioned estimator for Adam-like optimisers (AdaptDL PR #95, issue 32): on
synthetic gradients of known per-coordinate variance, measured through Adam's √v̂ + ε,
φ is that of the preconditioned gradient, as the plain estimator's is of the plain one."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edl.runtime.precondition import WARMUP_STEPS, adam_preconditioner, sqnorm_tensor
from edl.throughput.efficiency import NoiseScaleEstimator

DIM = 128


@settings(max_examples=6, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    count=st.integers(2, 8),
    ratio=st.floats(0.25, 4.0),
    spread=st.floats(0.5, 2.5),
    step=st.integers(WARMUP_STEPS, 10_000),
)
def test_preconditioned_estimator_recovers_the_preconditioned_noise_scale(
    seed: int, count: int, ratio: float, spread: float, step: int
) -> None:
    """Gradient and noise vary per coordinate over e^±spread, Adam's second moment over
    e^±2·spread: the estimate is Σ σⱼ²/pⱼ² / Σ Gⱼ²/pⱼ² within 10 % (pⱼ = √v̂ⱼ + ε), any
    replica count, a total batch from φ/4 to 4φ."""
    rng = np.random.default_rng(seed)
    grad = rng.normal(size=DIM) * np.exp(rng.uniform(-spread, spread, DIM))
    sigma = np.exp(rng.uniform(-spread, spread, DIM))  # per-sample noise per coordinate
    beta2, eps = 0.999, 1e-8
    exp_avg_sq = torch.from_numpy(np.exp(rng.uniform(-2 * spread, 2 * spread, DIM)))
    pre = adam_preconditioner(exp_avg_sq, float(step), beta2, eps)
    assert pre is not None
    p = pre.numpy()
    # the preconditioned φ per sample, and a batch around it (where it is worth measuring)
    phi = float(np.sum(sigma**2 / p**2) / np.sum(grad**2 / p**2))
    per_gradient = max(1, round(ratio * phi / count))
    initial = count * per_gradient
    estimator = NoiseScaleEstimator(smoothing=0.99999)
    for _ in range(2500):
        noise = rng.normal(size=(count, DIM)) * sigma / math.sqrt(per_gradient)
        local = torch.from_numpy(grad[None, :] + noise)
        local_sqr = float(np.mean([float(sqnorm_tensor(g, pre)) for g in local]))
        total_sqr = float(sqnorm_tensor(local.mean(dim=0), pre))
        assert estimator.observe(local_sqr, total_sqr, count, 1.0)
    estimate = estimator.noise_scale(initial)
    assert estimate is not None
    assert estimate == pytest.approx(phi, rel=0.10)


def test_before_warm_up_the_plain_gradient_is_measured() -> None:
    exp_avg_sq = torch.ones(4)
    assert adam_preconditioner(exp_avg_sq, WARMUP_STEPS - 1, 0.999, 1e-8) is None
    assert adam_preconditioner(None, 100, 0.999, 1e-8) is None
    grad = torch.tensor([3.0, 4.0, 0.0, 0.0])
    assert float(sqnorm_tensor(grad, None)) == 25.0
    pre = adam_preconditioner(torch.full((4,), 4.0), 1e9, 0.999, 0.0)  # bias correction ~1
    assert pre is not None and float(sqnorm_tensor(grad, pre)) == pytest.approx(25.0 / 4)
