"""Acceptance of issue 10: a service takes 75 % of the cluster and gives it back every
60 s, 20 times, beside one elastic job (data/service_cycles.yaml), on the faithful model.

Bound = autoscaler interval + maximum pod start latency + 2 s. With the trainers run
by edl's controller, every cycle the trainers are back to their level within the
bound of the service leaving, and the service reaches its target within the bound of
its rise. The same scenario with the trainer Job run by the Job controller (the old
design) leaves the trainers out for the back-off's 10 minutes after the first cycle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from edl.sim.runner import run_policy
from edl.sim.scenario import load_scenario

SCENARIO = Path(__file__).parent / "data" / "service_cycles.yaml"
CYCLES, FIRST_RISE, PERIOD, UP_FOR, TARGET = 20, 60, 120, 60, 40


@pytest.fixture(scope="module")
def scenario():
    return load_scenario(SCENARIO)


def bound(scenario) -> float:
    return scenario.autoscaler.interval_s + scenario.pod_start_latency_s.max + 2.0


def cycles(timeline):
    """Per cycle: (trainers before the rise, s until back after the service left,
    s until the service ran its target after its rise); None: never within the run."""
    times, job, service = timeline.times, timeline.jobs["elastic"], timeline.workloads["burst"]
    row = {t: i for i, t in enumerate(times)}
    result = []
    for k in range(CYCLES):
        rise = FIRST_RISE + PERIOD * k
        down = rise + UP_FOR
        level = job.trainers_running[row[rise] - 1]
        back = next((times[i] - down for i in range(row[down], len(times))
                     if job.trainers_running[i] >= level), None)
        reached = next((times[i] - rise for i in range(row[rise], row[down])
                        if service.running[i] >= TARGET), None)
        result.append((level, back, reached))
    return result


def test_trainers_and_service_are_back_within_the_bound_every_cycle(scenario):
    limit = bound(scenario)
    measured = cycles(run_policy(scenario, "default").timeline)
    levels = {level for level, _, _ in measured}
    assert levels == {60}  # the job is at its max before every rise
    for cycle, (_, back, reached) in enumerate(measured):
        assert back is not None and back <= limit, (cycle, back)
        assert reached is not None and reached <= limit, (cycle, reached)


def test_the_old_design_keeps_the_trainers_out_for_the_back_off(scenario):
    limit = bound(scenario)
    measured = cycles(run_policy(scenario, "default", trainer_workload="job").timeline)
    first_level, first_back, _ = measured[0]
    assert first_level == 60 and first_back is not None and first_back > 10 * 60
    # every following cycle starts far below the level the managed trainers keep
    late = [level for level, _, _ in measured[1:]]
    assert sum(level < 60 for level in late) >= len(late) // 2
    assert all(back is None or back > limit for level, back, _ in measured if level == 60)
