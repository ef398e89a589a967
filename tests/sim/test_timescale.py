"""`scale_time`: every duration of a scenario times one factor, nothing else changed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edl.sim.scenario import expand_jobs, load_scenario, shipped_scenarios
from edl.sim.timescale import scale_time

NO_WORK = [name for name in shipped_scenarios()
           if all(g.work is None for g in load_scenario(name).training.jobs)]


def times(scenario) -> list[float]:
    """Every time of a scenario, in a fixed order."""
    out = [scenario.duration_s, scenario.sample_interval_s, scenario.autoscaler.interval_s,
           scenario.pod_start_latency_s.min, scenario.pod_start_latency_s.max,
           *(getattr(scenario.termination_s, r) for r in ("trainer", "pserver", "master",
                                                          "other")),
           scenario.measure.utilization_until_s, scenario.measure.steady_state.start,
           scenario.measure.steady_state.end]
    out += [step.at for w in scenario.workloads for step in w.schedule]
    for plan in sorted(expand_jobs(scenario), key=lambda plan: plan.name):
        out += [plan.submit_at, -1.0 if plan.delete_at is None else plan.delete_at]
    return out


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(NO_WORK), st.floats(0.05, 4.0))
def test_every_time_is_multiplied_and_nothing_else_changes(name, factor):
    scenario = load_scenario(name)
    scaled = scale_time(scenario, factor)
    assert times(scaled) == pytest.approx(
        [t * factor if t >= 0 else t for t in times(scenario)])
    # the rest is untouched: same jobs, shapes, nodes, replicas, policy settings
    assert sorted(p.name for p in expand_jobs(scaled)) == sorted(
        p.name for p in expand_jobs(scenario))
    assert scaled.cluster == scenario.cluster
    assert scaled.autoscaler.max_load_desired == scenario.autoscaler.max_load_desired
    assert [[s.replicas for s in w.schedule] for w in scaled.workloads] == [
        [s.replicas for s in w.schedule] for w in scenario.workloads]
    assert scale_time(scaled, 1 / factor).duration_s == pytest.approx(scenario.duration_s)


def test_a_scaled_scenario_still_validates():
    scaled = scale_time(load_scenario("fidelity"), 0.5)
    assert type(scaled).model_validate(scaled.model_dump()) == scaled


def test_bad_factors_and_jobs_with_work_are_refused():
    with pytest.raises(ValueError, match="positive"):
        scale_time(load_scenario("fidelity"), 0)
    with_work = next(name for name in shipped_scenarios() if name not in NO_WORK)
    with pytest.raises(ValueError, match="jobs with work cannot be time-scaled"):
        scale_time(load_scenario(with_work), 0.5)
