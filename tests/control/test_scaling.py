"""ScalingTracker: what the Autoscaler tells a throughput-aware policy about each job."""

from __future__ import annotations

import pytest

from edl.control.scaling import ScalingTracker
from edl.throughput import Observation, UslCurve
from edl.throughput.board import ThroughputBoard

KEY = ("ns", "job")
PRIOR = {"edl.dev/throughput-prior": '{"per_trainer": 100}', "edl.dev/join-cost-s": "30"}


async def test_prior_then_fit_from_the_board_with_resize_history() -> None:
    board = ThroughputBoard()
    tracker = ScalingTracker(board)
    assert await tracker.scaling(KEY, 0.0) is None  # unknown job
    tracker.remember(KEY, PRIOR)
    first = await tracker.scaling(KEY, 10.0)
    assert first is not None and first.source == "declared prior"
    assert first.curve == UslCurve(100.0) and first.join_cost_s == 30.0
    assert first.since_grow_s is None and first.since_shrink_s is None
    truth = UslCurve(50.0, 0.2)
    for at, n in enumerate((1, 2, 4), start=1):
        board.publish(*KEY, Observation(float(at), n, truth.rate(n), remaining_samples=500.0))
    tracker.resized(KEY, +2, now=20.0)
    tracker.resized(KEY, -1, now=30.0)
    fitted = await tracker.scaling(KEY, 50.0)
    assert fitted is not None and fitted.source == "fit of 3 trainer counts"
    assert fitted.curve.rate(8) == pytest.approx(truth.rate(8), rel=0.05)
    assert (fitted.since_grow_s, fitted.since_shrink_s) == (30.0, 20.0)
    assert fitted.remaining_samples == 500.0
    assert fitted.measured_samples_per_s == pytest.approx(truth.rate(4))
    # points already read are not read twice
    assert await board.job_throughput(*KEY, 3.0) == []
    tracker.forget(KEY)
    assert await tracker.scaling(KEY, 60.0) is None


async def test_no_prior_and_no_measurement_means_no_scaling() -> None:
    tracker = ScalingTracker(ThroughputBoard())
    tracker.remember(KEY, {"edl.dev/throughput-prior": "not json"})
    assert await tracker.scaling(KEY, 0.0) is None


async def test_a_resized_job_without_a_curve_still_reports_its_cooldowns() -> None:
    """Nothing declared nor measured yet, but resized: reported as linear with the
    times since its resizes, so a policy's cooldowns hold for it too."""
    tracker = ScalingTracker(ThroughputBoard())
    tracker.remember(KEY, {"edl.dev/join-cost-s": "45"})
    assert await tracker.scaling(KEY, 0.0) is None
    tracker.resized(KEY, +10, now=5.0)
    scaling = await tracker.scaling(KEY, 12.0)
    assert scaling is not None and scaling.curve == UslCurve(1.0)
    assert scaling.source == "none: linear assumed" and scaling.join_cost_s == 45.0
    assert (scaling.since_grow_s, scaling.since_shrink_s) == (7.0, None)


async def test_measurements_at_a_chosen_batch_are_fitted_at_the_declared_one() -> None:
    """A job with spec.batch: what it ran at a larger batch is converted back to its
    declared per-trainer batch through the compute rate it reports; φ and that rate
    are the means of the newest measurements."""
    from edl.throughput.batch import BatchLimits, throughput_at

    board = ThroughputBoard()
    tracker = ScalingTracker(board)
    limits = BatchLimits(64, 2, 4096)
    tracker.remember(KEY, None, limits)
    truth = UslCurve(20.0, 0.05, 0.001)
    for at, (n, batch) in enumerate(((2, 64.0), (4, 512.0), (8, 1024.0), (8, 2048.0)), 1):
        rate = throughput_at(truth, n, batch, limits.base)
        board.publish(*KEY, Observation(float(at), n, rate, 1000.0, batch=batch,
                                        noise_scale=100.0 * at, compute_rate=20.0))
    scaling = await tracker.scaling(KEY, 10.0, batch=2048.0)
    assert scaling is not None and scaling.batch_limits == limits
    assert scaling.batch == 2048.0 and scaling.compute_rate == pytest.approx(20.0)
    assert scaling.noise_scale == pytest.approx(250.0)
    for n in (2, 4, 8):  # the fit is of the declared batch's curve
        assert scaling.curve.rate(n) == pytest.approx(truth.rate(n), rel=0.03)


async def test_with_no_batch_chosen_the_batch_is_the_one_the_job_reports() -> None:
    """A collective job's helper runs its initial total batch at any world size until
    a batch is chosen: the policy must start from that batch, not from the declared
    per-trainer batch times its trainers."""
    from edl.throughput.batch import BatchLimits

    board = ThroughputBoard()
    tracker = ScalingTracker(board)
    tracker.remember(KEY, PRIOR, BatchLimits(32, 1, 512))
    board.publish(*KEY, Observation(1.0, 4, 2000.0, None, batch=32.0, noise_scale=100.0))
    scaling = await tracker.scaling(KEY, 2.0)
    assert scaling is not None and scaling.batch == 32.0
    assert (await tracker.scaling(KEY, 3.0, batch=104.0)).batch == 104.0  # type: ignore[union-attr]


async def test_the_measured_pause_is_smoothed_once_per_resize() -> None:
    """The runtime's pause rides on its throughput records with a resize count; the
    tracker folds each resize once (records re-read carry the same count) and the
    Scaling says it was measured."""
    board = ThroughputBoard()
    tracker = ScalingTracker(board)
    tracker.remember(KEY, PRIOR)
    first = await tracker.scaling(KEY, 0.0)
    assert first is not None and first.pause_source == "" and first.resize_pause_s == 0.0
    for at in (1.0, 2.0, 3.0):  # one resize, read three times
        board.publish(*KEY, Observation(at, 2, 200.0, resize_pause_s=40.0, resizes=1))
    once = await tracker.scaling(KEY, 4.0)
    assert once is not None and once.resize_pause_s == 40.0
    assert once.pause_source == "measured over 1 resizes"
    board.publish(*KEY, Observation(5.0, 4, 380.0, resize_pause_s=20.0, resizes=2))
    twice = await tracker.scaling(KEY, 6.0)
    assert twice is not None and 20.0 < twice.resize_pause_s < 40.0
    assert twice.pause_source == "measured over 2 resizes"
