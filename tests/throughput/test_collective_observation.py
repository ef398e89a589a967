"""A collective job's metrics record as a point of its goodput curve (issue 22)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edl.throughput.progress import observation_from_metrics


def test_the_adaptive_helper_s_record_is_an_observation_with_batch_and_noise_scale() -> None:
    record = {"epoch": 3.0, "trainers": 2.0, "samples_per_s": 850.5, "batch": 64.0,
              "noise_scale": 120.0, "efficiency": 0.8, "gain": 1.3}
    point = observation_from_metrics(record, 7.0)
    assert point is not None
    assert (point.at, point.trainers, point.samples_per_s) == (7.0, 2, 850.5)
    assert (point.batch, point.noise_scale, point.remaining_samples) == (64.0, 120.0, None)


def test_a_record_without_a_rate_or_trainers_is_no_point() -> None:
    assert observation_from_metrics(None, 1.0) is None
    assert observation_from_metrics({"epoch": 1.0, "loss": 0.3}, 1.0) is None
    assert observation_from_metrics({"trainers": 2.0, "samples_per_s": 0.0}, 1.0) is None
    assert observation_from_metrics({"trainers": "x", "samples_per_s": 3.0}, 1.0) is None


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a shared machine
@given(st.dictionaries(st.sampled_from(["trainers", "samples_per_s", "batch", "noise_scale"]),
                       st.one_of(st.floats(allow_nan=True), st.text(max_size=3), st.none())))
def test_any_record_gives_a_valid_point_or_none(record: dict[str, object]) -> None:
    point = observation_from_metrics(record, 0.0)  # never raises (int(inf), nan, text)
    assert point is None or (point.trainers > 0 and point.samples_per_s > 0
                             and point.noise_scale != 0)
