"""Scaling curves and their online fit."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edl.throughput import Observation, OnlineFit, PointsCurve, UslCurve, fit_usl
from edl.throughput.annotations import curve_from_dict, curve_to_dict, read_hints


@settings(max_examples=60, deadline=None)
@given(st.floats(5, 200), st.floats(0, 0.3), st.sampled_from([0.0, 1e-4, 1e-3]))
def test_fit_recovers_a_usl_curve_from_three_counts(rate, serial, comm) -> None:
    truth = UslCurve(rate, serial, comm)
    fitted = fit_usl([(n, truth.rate(n)) for n in (1, 2, 3)])
    for n in (1, 2, 3):
        assert fitted.rate(n) == pytest.approx(truth.rate(n), rel=0.05)


def test_fit_tracks_noisy_measurements_within_ten_percent() -> None:
    truth = UslCurve(40.0, 0.05, 0.001)
    rng = random.Random(7)
    fit = OnlineFit()
    for step in range(120):
        n = (1, 2, 4, 8)[step % 4]
        fit.add(Observation(step, n, truth.rate(n) * (1 + rng.gauss(0, 0.05))))
    curve = fit.curve()
    for n in (1, 2, 4, 8, 12):
        assert curve.rate(n) == pytest.approx(truth.rate(n), rel=0.1)


def test_prior_until_enough_counts_then_the_fit() -> None:
    prior = UslCurve(100.0)  # declared: linear, optimistic
    truth = UslCurve(50.0, 0.3)
    fit = OnlineFit(prior)
    assert fit.curve() is prior
    fit.add(Observation(1, 4, truth.rate(4)))
    scaled = fit.curve()  # one count: the prior's shape through the measurement
    assert scaled.rate(4) == pytest.approx(truth.rate(4))
    assert scaled.rate(8) == pytest.approx(2 * truth.rate(4))
    fit.add(Observation(2, 5, truth.rate(5)))  # two close counts: still the prior's shape
    assert fit.curve().rate(10) == pytest.approx(2 * fit.curve().rate(5), rel=0.05)
    fit.add(Observation(3, 10, truth.rate(10)))
    for n in (4, 5, 10, 20):
        assert fit.curve().rate(n) == pytest.approx(truth.rate(n), rel=0.05)


def test_memory_per_count_survives_a_long_stay_at_one_size() -> None:
    truth = UslCurve(50.0, 0.3)
    fit = OnlineFit(UslCurve(100.0))
    for at, n in enumerate((2, 4, 8)):
        fit.add(Observation(at, n, truth.rate(n)))
    for at in range(3, 1000):
        fit.add(Observation(at, 8, truth.rate(8)))
    assert [n for n, _ in fit.points()] == [2, 4, 8]
    assert fit.curve().rate(16) == pytest.approx(truth.rate(16), rel=0.05)


def test_points_curve_interpolates_and_stays_flat_beyond() -> None:
    curve = PointsCurve(((2, 100.0), (4, 180.0)))
    assert curve.rate(1) == 50.0  # through (0, 0)
    assert curve.rate(3) == 140.0
    assert curve.rate(10) == 180.0
    with pytest.raises(ValueError):
        PointsCurve(((2, 1.0), (2, 2.0)))


def test_annotations_round_trip_and_name_problems() -> None:
    for curve in (UslCurve(10.0, 0.1, 0.001), PointsCurve(((1, 5.0), (4, 15.0)))):
        assert curve_from_dict(curve_to_dict(curve)) == curve
    prior, join, problems = read_hints({
        "edl.dev/throughput-prior": '{"per_trainer": 10, "bogus": 1}',
        "edl.dev/join-cost-s": "-3",
    })
    assert prior is None and join == 0.0
    assert any("bogus" in p for p in problems) and any("join-cost" in p for p in problems)


def test_two_large_counts_do_not_make_a_curve_flat_from_one_trainer() -> None:
    truth = PointsCurve(((1, 40.0), (8, 260.0), (16, 280.0), (40, 282.0)))
    for prior in (UslCurve(40.0), None):  # declared (optimistic, linear), or none
        fit = OnlineFit(prior)
        fit.add(Observation(1, 20, truth.rate(20)))
        fit.add(Observation(2, 40, truth.rate(40)))
        curve = fit.curve()
        assert "anchor" in fit.method
        for n in (20, 40):  # still the measurements where they were made
            assert curve.rate(n) == pytest.approx(truth.rate(n), rel=0.1)
        # below them it rises, as a USL job must (flat from one trainer fits too)
        assert curve.rate(2) < 0.5 * curve.rate(20)
        fit.add(Observation(3, 2, truth.rate(2)))  # a real small count: no anchor
        assert fit.curve().rate(2) == pytest.approx(truth.rate(2), rel=0.1)
        assert "anchor" not in fit.method
