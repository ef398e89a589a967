"""The parameter-server path of batch adaptation (issue 22): shards that sum k pushes
into one update measure the gradient noise scale, summed over shards, on synthetic
gradients of known variance; Adam's is measured through its preconditioner; a
non-finite push is dropped; an incomplete update is applied when it goes stale and
survives a checkpoint."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edl.runtime.pserver.aggregate import Aggregation
from edl.runtime.pserver.checkpoint import decode_checkpoint, encode_checkpoint
from edl.runtime.pserver.optim import OptimizerConfig
from edl.runtime.pserver.shard import Shard
from edl.throughput.efficiency import NoiseScaleEstimator
from edl.throughput.shards import combine_shards, job_estimate

DIM = 256


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_shards(sizes: list[int], initial: int, optimizer: str = "sgd",
                lr: float = 1e-9, clock: Clock | None = None) -> list[Shard]:
    """Shards holding consecutive slices of one parameter "w", each aggregating to
    ``initial`` samples, their estimators averaging every update (φ is fixed)."""
    shards = []
    for size in sizes:
        shard = Shard()
        shard.aggregation = Aggregation(initial, flush_after=5.0, clock=clock or Clock())
        shard.aggregation.estimator = NoiseScaleEstimator(smoothing=0.99999)
        shard.init({"w#0": np.zeros(size, np.float32)}, OptimizerConfig(name=optimizer, lr=lr))
        shards.append(shard)
    return shards


def push_everywhere(shards: list[Shard], sizes: list[int], grad: np.ndarray, samples: int,
                    send_norm: bool = True) -> None:
    """One trainer's push: each shard gets its slice and (as the trainer sends it) the
    slice's squared norm."""
    start = 0
    for shard, size in zip(shards, sizes, strict=True):
        block = grad[start : start + size].astype(np.float32)
        start += size
        norm = float(np.dot(block.astype(np.float64), block)) if send_norm else None
        shard.push({"w#0": block}, samples, norm)


def known_gradient(rng: np.random.Generator, scales: np.ndarray | None = None) -> np.ndarray:
    grad = rng.standard_normal(DIM) * (1.0 if scales is None else scales)
    return grad / np.linalg.norm(grad)  # |G|² = 1


def split(shard_count: int) -> list[int]:
    base, extra = divmod(DIM, shard_count)
    return [base + (1 if i < extra else 0) for i in range(shard_count)]


@settings(max_examples=6, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    phi_over_batch=st.floats(0.25, 8.0),
    per_trainer=st.sampled_from([8, 16, 32]),
    k=st.integers(2, 5),
    shard_count=st.integers(1, 3),
    optimizer=st.sampled_from(["sgd", "momentum"]),
)
def test_shards_summing_k_pushes_recover_a_known_noise_scale(
    seed: int, phi_over_batch: float, per_trainer: int, k: int, shard_count: int,
    optimizer: str,
) -> None:
    rng = np.random.default_rng(seed)
    initial = per_trainer * k
    phi = phi_over_batch * initial  # φ = tr Σ / |G|² (samples); |G|² = 1
    sigma = math.sqrt(phi / DIM)  # per-sample noise per coordinate
    sizes = split(shard_count)
    shards = make_shards(sizes, initial, optimizer)
    grad = known_gradient(rng)
    for _ in range(1500 * k):
        noise = rng.standard_normal(DIM) * sigma / math.sqrt(per_trainer)
        push_everywhere(shards, sizes, grad + noise, per_trainer)
    figures = combine_shards([s.aggregation_record() or {} for s in shards])
    assert figures["batch"] == initial and figures["updates"] == 1500
    assert figures["noise_scale"] == pytest.approx(phi, rel=0.10)
    assert figures["efficiency"] == pytest.approx(1.0) and figures["gain"] == pytest.approx(1.0)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**31), phi=st.floats(32.0, 512.0))
def test_pushes_of_unequal_sizes_still_recover_the_noise_scale(seed: int, phi: float) -> None:
    rng = np.random.default_rng(seed)
    sizes, initial = split(2), 64
    shards = make_shards(sizes, initial)
    grad, sigma = known_gradient(rng), math.sqrt(phi / DIM)
    for _ in range(8000):
        samples = int(rng.choice([8, 16, 24, 40]))  # a task's last batch is smaller, etc.
        noise = rng.standard_normal(DIM) * sigma / math.sqrt(samples)
        push_everywhere(shards, sizes, grad + noise, samples)
    figures = combine_shards([s.aggregation_record() or {} for s in shards])
    assert figures["noise_scale"] == pytest.approx(phi, rel=0.10)


def test_one_push_per_update_is_measured_against_the_previous_one() -> None:
    rng = np.random.default_rng(7)
    phi, per_trainer = 200.0, 32
    sizes = split(2)
    shards = make_shards(sizes, per_trainer)  # the batch is one trainer's: k = 1
    grad, sigma = known_gradient(rng), math.sqrt(phi / DIM)
    for _ in range(4000):
        push_everywhere(shards, sizes, grad + rng.standard_normal(DIM) * sigma
                        / math.sqrt(per_trainer), per_trainer)
    figures = combine_shards([s.aggregation_record() or {} for s in shards])
    assert figures["updates"] == 4000
    assert figures["noise_scale"] == pytest.approx(phi, rel=0.10)


def test_adam_is_measured_through_its_preconditioner() -> None:
    """Per-coordinate noise and signal of very different sizes: the noise Adam's steps
    see (g / (√v̂ + ε)) has another φ than the plain gradient's; the shards measure it."""
    rng = np.random.default_rng(11)
    per_trainer, k = 16, 3
    initial = per_trainer * k
    sizes = split(2)
    shards = make_shards(sizes, initial, optimizer="adam", lr=1e-9)
    grad = known_gradient(rng, scales=np.exp(rng.uniform(-1.5, 1.5, DIM)))
    sigma = 0.08 * np.exp(rng.uniform(-1.5, 1.5, DIM))  # per-sample noise per coordinate
    for _ in range(3000 * k):
        push_everywhere(shards, sizes, grad + rng.standard_normal(DIM) * sigma
                        / math.sqrt(per_trainer), per_trainer, send_norm=False)
    preconditioner = torch.cat([s.optimizer.preconditioner(s.state["w#0"]) for s in shards])
    p = preconditioner.numpy()
    expected = float(np.sum(sigma**2 / p**2) / np.sum(grad**2 / p**2))
    plain = float(np.sum(sigma**2) / np.sum(grad**2))
    assert abs(plain - expected) / expected > 0.25  # the two really differ here
    figures = combine_shards([s.aggregation_record() or {} for s in shards])
    assert figures["noise_scale"] == pytest.approx(expected, rel=0.10)
    assert all((s.aggregation_record() or {})["adaptive"] for s in shards)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), cut=st.integers(1, DIM - 1), k=st.integers(2, 4))
def test_shards_sum_to_what_one_shard_would_measure(seed: int, cut: int, k: int) -> None:
    """Squared norms add over coordinates: two shards' summed estimates are one shard's."""
    rng = np.random.default_rng(seed)
    one, two = make_shards([DIM], 8 * k), make_shards([cut, DIM - cut], 8 * k)
    grad = known_gradient(rng)
    for _ in range(20 * k):
        noisy = grad + rng.standard_normal(DIM)
        push_everywhere(one, [DIM], noisy, 8)
        push_everywhere(two, [cut, DIM - cut], noisy, 8)
    whole = job_estimate([one[0].aggregation_record() or {}])
    parts = job_estimate([s.aggregation_record() or {} for s in two])
    assert whole is not None and parts is not None
    assert parts == pytest.approx(whole, rel=1e-4)


def test_a_non_finite_push_is_dropped_not_applied() -> None:
    shard = make_shards([4], 2, lr=0.5)[0]
    bad = np.array([1.0, np.nan, 0.0, 0.0], np.float32)
    assert shard.push({"w#0": bad}, 1, float("nan")) is False
    assert shard.push({"w#0": bad}, 1, 1.0) is False  # a wrong norm is checked, too
    record = shard.aggregation_record() or {}
    assert record["skipped"] == 2 and record["pending"] == 0 and shard.version == 0
    shard.push({"w#0": np.ones(4, np.float32)}, 1, 4.0)
    shard.push({"w#0": np.ones(4, np.float32)}, 1, 4.0)
    assert shard.version == 1
    np.testing.assert_allclose(shard.read()[1]["w#0"], -0.5 * np.ones(4))


def test_an_incomplete_update_is_applied_once_stale() -> None:
    clock = Clock()
    shard = make_shards([4], 4, lr=1.0, clock=clock)[0]
    shard.push({"w#0": np.full(4, 2.0, np.float32)}, 1, 16.0)  # 1 of 4 samples, then silence
    assert not shard.flush_stale() and shard.version == 0
    clock.now = 5.0
    assert shard.flush_stale() and shard.version == 1
    np.testing.assert_allclose(shard.read()[1]["w#0"], -2.0 * np.ones(4))
    record = shard.aggregation_record() or {}
    assert record["received"] == record["applied"] == 1 and record["pending"] == 0


def test_a_pending_update_survives_a_checkpoint() -> None:
    first = make_shards([4], 4, lr=1.0)[0]
    first.push({"w#0": np.array([4, 0, 0, 0], np.float32)}, 2, 16.0)
    restored = make_shards([4], 4, lr=1.0)[0]
    restored.restore(decode_checkpoint(encode_checkpoint(first.snapshot())))
    assert restored.version == 0 and (restored.aggregation_record() or {})["pending"] == 1
    restored.push({"w#0": np.array([0, 4, 0, 0], np.float32)}, 2, 16.0)  # completes it
    assert restored.version == 1
    np.testing.assert_allclose(restored.read()[1]["w#0"], [-2.0, -2.0, 0.0, 0.0])


def test_a_push_without_samples_is_refused_when_the_job_adapts_its_batch() -> None:
    shard = make_shards([4], 4)[0]
    with pytest.raises(ValueError, match="samples"):
        shard.push({"w#0": np.ones(4, np.float32)}, 0, 4.0)
    plain = Shard()  # without spec.batch every push is applied on its own, as before
    plain.init({"w#0": np.zeros(4, np.float32)}, OptimizerConfig(lr=1.0))
    plain.push({"w#0": np.ones(4, np.float32)})
    assert plain.version == 1 and plain.aggregation_record() is None
