"""The fidelity comparison and kwok configuration, on hand-made data (no cluster)."""

from __future__ import annotations

import pytest

from e2e.control_plane import PlaneConfig
from e2e.fidelity import plane_config
from e2e.fidelity_compare import compare, event_times
from e2e.kwok_stages import kwok_config
from edl.sim.runner import run_policy
from edl.sim.scenario import load_scenario, parse_scenario
from edl.sim.timeline import JobSeries, Timeline

SCENARIO = {
    "name": "tiny", "duration_s": 4, "measure": {"utilization_until_s": 4,
                                                 "steady_state": {"start": 0, "end": 4}},
    "cluster": {"node_groups": [{"name": "n", "count": 1,
                                 "allocatable": {"cpu": "10", "memory": "10Gi"}}]},
    "workloads": [{"name": "web", "resources": {"requests": {"cpu": "1"}},
                   "schedule": [{"at": 0, "replicas": 1}, {"at": 2, "replicas": 3}]}],
}


def timeline(trainers: list[int], used_milli: list[int]) -> Timeline:
    n = len(trainers)
    return Timeline(times=[float(t) for t in range(n)], cpu_running_milli=used_milli,
                    cpu_allocatable_milli=[10000] * n,
                    jobs={"a": JobSeries([True] * n, [True] * n, trainers, trainers)})


def test_stretches_compare_the_last_sample_and_time_the_last_change() -> None:
    scenario = parse_scenario(SCENARIO)
    assert event_times(scenario) == [0, 2]
    sim = timeline([0, 4, 4, 2, 2], [0, 5000, 5000, 3000, 3000])
    real = timeline([0, 4, 4, 4, 3], [0, 5000, 5000, 5000, 4000])
    result = compare(scenario, sim, real)
    first, second = result.stretches
    assert (first.start, first.end, first.sim, first.real) == (0, 2, {"a": 4}, {"a": 4})
    assert (first.sim_settle_s, first.real_settle_s) == (1, 1)
    assert second.sim == {"a": 2} and second.real == {"a": 3} and not second.same
    assert (second.sim_settle_s, second.real_settle_s) == (1, 2)
    assert result.sim_util_pct == pytest.approx(32.0)
    assert result.real_util_pct == pytest.approx(38.0)
    assert "**no**" in result.table()


def test_kwok_plays_the_scenarios_latencies() -> None:
    config = plane_config(load_scenario("fidelity"))
    assert (config.nodes, config.node_cpu, config.node_memory) == (20, "8", "32Gi")
    stages = {s["metadata"]["name"]: s["spec"] for s in kwok_config(config)}
    assert stages["pod-ready"]["delay"] == {"durationMilliseconds": 1000,
                                            "jitterDurationMilliseconds": 3000}
    assert "delay" not in stages["pod-create"]
    delays = {name: spec["delay"]["durationMilliseconds"] for name, spec in stages.items()
              if name.startswith("pod-delete")}
    assert delays == {"pod-delete-master": 2000, "pod-delete-pserver": 2000,
                      "pod-delete-trainer": 2000, "pod-delete-other": 1000}
    assert "pod-crash" not in stages


def test_the_session_plane_keeps_one_delete_stage() -> None:
    stages = [s["metadata"]["name"] for s in kwok_config(PlaneConfig())]
    assert [s for s in stages if s.startswith("pod-delete")] == ["pod-delete"]


def test_scenarios_the_real_runner_cannot_replay_are_refused() -> None:
    data = {**SCENARIO, "placement": "binpack", "cluster": {"node_groups": [
        {"name": "a", "count": 1, "allocatable": {"cpu": "1", "memory": "1Gi"}},
        {"name": "b", "count": 1, "allocatable": {"cpu": "1", "memory": "1Gi", "gpu": 1}}]}}
    with pytest.raises(ValueError, match=r"exactly one group.*placement: spread.*no GPUs"):
        plane_config(parse_scenario(data))


def test_the_shipped_scenarios_settled_allocations_do_not_depend_on_the_seed() -> None:
    """The e2e test demands the real run's allocations equal seed 0's: fair only because
    the simulator settles on the same ones whatever its random draws (start latencies,
    the scheduler's tie-breaks). A scenario where they vary (bench/fidelity_varied.yaml)
    must be compared against the spread over seeds instead (docs/fidelity.md)."""
    scenario = load_scenario("fidelity")
    seen = set()
    for seed in range(4):
        sim = run_policy(scenario, "default", seed).timeline
        seen.add(tuple((s.start, tuple(sorted(s.sim.items())))
                       for s in compare(scenario, sim, sim).stretches))
    assert len(seen) == 1
