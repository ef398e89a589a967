"""A parameter-server job's figures from its pservers' shard records, and the master's
progress that carries them as a point of its goodput curve (issue 22)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from edl.throughput.efficiency import adascale_gain, efficiency
from edl.throughput.progress import observation_from_metrics, observation_from_progress
from edl.throughput.records import DROPPED
from edl.throughput.shards import combine_shards, job_estimate, parse_records


def record(sqr: float | None, var: float | None, batch: int = 64, initial: int = 32,
           adaptive: bool = False) -> dict:
    return {"sqr": sqr, "var": var, "batch": batch, "initial_batch": initial,
            "adaptive": adaptive, "updates": 10, "skipped": 0}


def test_shards_add_their_squared_norms() -> None:
    figures = combine_shards([record(0.6, 30.0), record(0.4, 70.0)])
    # |G|² = 1, variance at the initial batch 100: φ = 32 · 100 / 1
    assert figures["noise_scale"] == pytest.approx(3200.0)
    assert figures["efficiency"] == pytest.approx(efficiency(3200.0, 32, 64), abs=1e-4)
    assert figures["gain"] == pytest.approx(adascale_gain(100.0, 1.0, 2.0), abs=1e-4)
    assert (figures["batch"], figures["initial_batch"], figures["shards"]) == (64, 32, 2)


def test_a_part_below_zero_is_summed_before_clipping() -> None:
    assert job_estimate([record(-0.2, 5.0), record(1.2, 5.0)]) == pytest.approx((10.0, 1.0))
    assert job_estimate([record(None, None)]) is None


def test_adam_s_gain_is_the_square_root() -> None:
    sgd = combine_shards([record(1.0, 100.0)])["gain"]
    adam = combine_shards([record(1.0, 100.0, adaptive=True)])["gain"]
    assert adam == pytest.approx(math.sqrt(sgd), abs=1e-3)


def test_before_any_measurement_only_the_batch_is_known() -> None:
    assert combine_shards([record(None, None)]) == {
        "batch": 64, "initial_batch": 32, "shards": 1, "updates": 10, "skipped": 0}
    assert combine_shards([]) == {}
    assert parse_records([b'{"sqr": 1}', b"not json", b"[1]"]) == [{"sqr": 1}]


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(
    st.sampled_from(["sqr", "var", "batch", "initial_batch", "adaptive", "updates"]),
    st.one_of(st.floats(allow_nan=True), st.text(max_size=3), st.none(), st.booleans())),
    max_size=4))
# found by hypothesis (issue 33): a huge batch overflowed φ, and True was read as 1
@example([{"initial_batch": 1.7976931348605183e+308, "batch": 1.0, "sqr": True, "var": 0.0}])
@example([{"initial_batch": 1e9, "batch": 1.0, "sqr": 1e-300, "var": 1e100}])
def test_any_records_give_finite_figures_or_none(records: list[dict]) -> None:
    figures = combine_shards(records)
    for name in ("batch", "noise_scale", "efficiency", "gain"):
        if name in figures:
            assert math.isfinite(figures[name]) and figures[name] >= 0


def test_the_master_s_progress_is_a_point_with_batch_and_noise_scale() -> None:
    progress = {"contributing": 3, "samples_per_s": 900.0, "remaining_samples": 5000,
                "batch": 96.0, "noise_scale": 140.5, "efficiency": 0.8, "gain": 1.2}
    point = observation_from_progress(progress, 4.0)
    assert point is not None
    assert (point.trainers, point.samples_per_s, point.remaining_samples) == (3, 900.0, 5000.0)
    assert (point.batch, point.noise_scale) == (96.0, 140.5)
    plain = observation_from_progress({**progress, "batch": None, "noise_scale": "x"}, 4.0)
    assert plain is not None and (plain.batch, plain.noise_scale) == (None, None)


def test_a_measured_but_unresolved_noise_scale_is_said_not_left_out() -> None:
    """|G|² summed to zero or below: φ is beyond what the updates resolve, which the job's
    figures say (`noise_unresolved`) instead of showing no figure or a made-up one."""
    figures = combine_shards([record(-0.3, 30.0), record(0.1, 70.0)])
    assert figures["noise_unresolved"] is True
    assert "noise_scale" not in figures and "efficiency" not in figures
    assert "noise_unresolved" not in combine_shards([record(0.6, 30.0)])
    assert "noise_unresolved" not in combine_shards([record(None, None)])


def test_unusable_values_from_other_processes_are_dropped_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before, DROPPED._seen = DROPPED.count, set()  # every kind of drop warns once again
    bad = [{"batch": True, "initial_batch": 32, "sqr": "1", "var": 1.0},  # bool, string
           {"batch": 64, "initial_batch": 1.7976931348605183e+308, "sqr": math.inf, "var": 2.0},
           {"batch": 64, "initial_batch": 32, "sqr": 1.0, "var": math.nan, "updates": 2.5}]
    with caplog.at_level("WARNING", logger="edl.throughput.records"):
        figures = combine_shards(bad)
    # of six bad values none reached a figure; the one shard with usable norms has no
    # variance: no φ, and the batch is the only usable one
    assert DROPPED.count - before == 6
    assert (figures["batch"], figures["initial_batch"]) == (64.0, 32.0)
    assert "noise_scale" not in figures
    assert "dropped from other processes' records so far" in caplog.text
    # a huge-but-finite pair whose φ overflows gives no φ, counted too
    before = DROPPED.count
    overflow = combine_shards([{"batch": 64, "initial_batch": 1e9, "sqr": 1e-300, "var": 1e100}])
    assert "noise_scale" not in overflow and DROPPED.count - before == 1


def test_a_collective_metrics_record_with_a_boolean_or_absurd_figure_is_no_point() -> None:
    good = {"trainers": 2.0, "samples_per_s": 500.0, "batch": 64.0, "noise_scale": 120.0}
    assert observation_from_metrics(good, 1.0) is not None
    assert observation_from_metrics({**good, "trainers": True}, 1.0) is None
    assert observation_from_metrics({**good, "samples_per_s": 1e300}, 1.0) is None
    point = observation_from_metrics({**good, "batch": 1e308, "noise_scale": "7"}, 1.0)
    assert point is not None and (point.batch, point.noise_scale) == (None, None)


def test_a_collective_metrics_record_carries_its_compute_rate() -> None:
    """`AdaptiveBatch` reports one trainer's computing rate (issue 32): it reaches the
    observation as a PS master's does; an absurd one is dropped, the point kept."""
    good = {"trainers": 2.0, "samples_per_s": 500.0, "batch": 64.0, "compute_rate": 400.0}
    point = observation_from_metrics(good, 1.0)
    assert point is not None and point.compute_rate == 400.0
    point = observation_from_metrics({**good, "compute_rate": -1.0}, 1.0)
    assert point is not None and point.compute_rate is None
