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
