"""A job's measured resize pause: the records carrying it, its smoothing, the cooldown
it sets, and the restart contract that measures it (issue 32)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from edl.runtime.collective.resize_pause import RESIZES_ENV, STARTED_ENV, measured_pause
from edl.throughput.pause import MAX_PAUSE_S, PauseEstimate, cooldown_s, ewma
from edl.throughput.progress import observation_from_metrics, observation_from_progress

pauses = st.floats(0.0, MAX_PAUSE_S)


@given(st.one_of(st.none(), pauses), pauses)
def test_the_average_moves_toward_the_new_pause_and_never_past_it(previous, value) -> None:
    folded = ewma(previous, value)
    if previous is None:
        assert folded == value
    else:
        low, high = sorted((previous, value))
        assert low - 1e-9 <= folded <= high + 1e-9
        assert abs(folded - value) <= abs(previous - value) + 1e-9


@given(st.lists(pauses, min_size=1, max_size=30))
def test_the_estimate_stays_within_the_pauses_measured(values) -> None:
    estimate = PauseEstimate()
    for count, value in enumerate(values, start=1):
        assert estimate.observe(value, count)
    assert estimate.value is not None and estimate.folded == len(values)
    assert min(values) - 1e-6 <= estimate.value <= max(values) + 1e-6


@given(pauses, st.integers(1, 20))
def test_a_steady_pause_is_what_the_estimate_says(pause, times) -> None:
    estimate = PauseEstimate()
    for count in range(1, times + 1):
        estimate.observe(pause, count)
    assert estimate.value is not None and math.isclose(estimate.value, pause, abs_tol=1e-9)


def test_a_pause_re_read_from_a_merged_record_is_folded_once() -> None:
    """The agent's record keeps the last value of each name: the same pause comes back
    with every read until the next resize, which the count tells apart."""
    estimate = PauseEstimate()
    assert estimate.observe(40.0, 1)
    for _ in range(5):
        assert not estimate.observe(40.0, 1)
    assert estimate.value == 40.0 and estimate.folded == 1
    assert estimate.observe(0.2, 2)
    assert estimate.value is not None and 0.2 < estimate.value < 40.0
    assert estimate.observe(0.2, 1)  # a restarted runtime counts from one again


@given(pauses, pauses, st.floats(0.001, 0.5), st.floats(0, 300), st.floats(0, 300))
def test_a_dearer_pause_never_shortens_the_cooldown(a, b, share, x, y) -> None:
    low, high = sorted((x, y))
    cheap, dear = sorted((a, b))
    assert low <= cooldown_s(cheap, share, low, high) <= high
    assert cooldown_s(cheap, share, low, high) <= cooldown_s(dear, share, low, high)


def test_a_live_pause_needs_the_shortest_cooldown_and_a_restart_the_longest() -> None:
    assert cooldown_s(0.15, 0.02, 30.0, 120.0) == 30.0
    assert cooldown_s(40.0, 0.02, 30.0, 120.0) == 120.0
    assert cooldown_s(1.0, 0.02, 30.0, 120.0) == 50.0


def test_records_carry_the_pause_and_drop_absurd_ones_with_a_count() -> None:
    record = {"trainers": 2.0, "samples_per_s": 800.0, "resize_pause_s": 0.15, "resizes": 3.0}
    point = observation_from_metrics(record, 1.0)
    assert point is not None and (point.resize_pause_s, point.resizes) == (0.15, 3)
    progress = {"contributing": 4, "samples_per_s": 90.0, "resize_pause_s": 2.5, "resizes": 1}
    point = observation_from_progress(progress, 1.0)
    assert point is not None and (point.resize_pause_s, point.resizes) == (2.5, 1)
    for bad in (float("nan"), float("inf"), -1.0, 1e9, "3", True):
        dropped_before = _dropped()
        point = observation_from_metrics({**record, "resize_pause_s": bad}, 1.0)
        assert point is not None and point.resize_pause_s is None  # the throughput stays
        assert _dropped() == dropped_before + 1
    point = observation_from_metrics({**record, "resizes": 1.5}, 1.0)
    assert point is not None and point.resizes is None


def _dropped() -> int:
    from edl.throughput import records

    return records.DROPPED.count



def test_a_restarted_world_measures_its_pause_from_the_agent_s_contract() -> None:
    env = {STARTED_ENV: "1000.0", RESIZES_ENV: "2"}
    assert measured_pause(env, now=1019.5) == {"resize_pause_s": 19.5, "resizes": 2.0}
    assert measured_pause({}, now=5.0) == {}  # the first world: nothing to measure
    assert measured_pause({STARTED_ENV: "x", RESIZES_ENV: "1"}, now=5.0) == {}
    assert measured_pause({STARTED_ENV: "10.0", RESIZES_ENV: "1"}, now=5.0) == {}  # clock
    assert measured_pause({STARTED_ENV: "nan", RESIZES_ENV: "1"}, now=5.0) == {}
