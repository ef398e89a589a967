"""Properties of the metric functions on arbitrary timelines."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edl.sim.metrics import jain_index, job_pending_time, workload_lags
from edl.sim.timeline import JobSeries, WorkloadSeries


@given(
    st.lists(
        # mean trainer counts: zero, or at least one sample's worth of a trainer
        st.one_of(st.just(0.0), st.floats(min_value=1e-3, max_value=1e4)),
        min_size=1, max_size=50,
    )
)
def test_jain_is_between_one_over_n_and_one(values: list[float]) -> None:
    index = jain_index(values)
    if index is None:
        assert all(value == 0 for value in values)
        return
    assert 1 / len(values) - 1e-9 <= index <= 1 + 1e-9
    scaled = jain_index([value * 3.5 for value in values])
    assert scaled is not None and abs(scaled - index) < 1e-9  # scale-free


@st.composite
def job_series(draw: st.DrawFn) -> tuple[list[float], JobSeries]:
    rows = draw(st.integers(min_value=1, max_value=40))
    times = [float(t) for t in range(rows)]
    present = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
    created = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
    running = draw(st.lists(st.integers(0, 5), min_size=rows, max_size=rows))
    return times, JobSeries(present, created, running, list(running))


@given(job_series())
def test_pending_time_is_within_the_run(data: tuple[list[float], JobSeries]) -> None:
    times, series = data
    pending = job_pending_time(times, series)
    if pending is None:
        assert not any(series.pods_created) and not any(series.present)
    else:
        assert 0 <= pending <= times[-1] - times[0]


@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=40)
)
def test_lags_cover_every_target_stretch(rows: list[tuple[int, int]]) -> None:
    times = [float(t) for t in range(len(rows))]
    series = WorkloadSeries([d for d, _ in rows], [r for _, r in rows])
    lags = workload_lags(times, series)
    # one entry per stretch of constant desired, in order, starting at the first sample
    changes = 1 + sum(1 for a, b in zip(series.desired, series.desired[1:], strict=False) if a != b)
    assert len(lags) == changes and lags[0].at == 0.0
    for lag in lags:
        assert 0 <= lag.lag_s <= times[-1]
        if lag.reached:
            row = times.index(lag.at + lag.lag_s)
            assert series.running[row] == series.desired[row] == lag.desired
