"""The mean-JCT lower bound (`edl.sim.jct_bound`) holds against real runs."""

from __future__ import annotations

import pytest

from edl.sim.jct_bound import jct_lower_bounds, mean_jct_lower_bound
from edl.sim.runner import run_policy
from edl.sim.scenario import load_scenario, parse_scenario


def _scenario(nodes: int) -> dict:
    job = {
        "trainer": {"min": 1, "max": 8, "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
        "pserver": {"count": 1, "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        "master": {"resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}},
    }
    return {
        "name": "jct-bound",
        "duration_s": 3000,
        "measure": {"utilization_until_s": 3000, "steady_state": {"start": 0, "end": 3000}},
        "cluster": {"node_groups": [
            {"name": "n", "count": nodes, "allocatable": {"cpu": "16", "memory": "64Gi"}}
        ]},
        "training": {"jobs": [
            {**job, "name": "peaks-{i}", "count": 2, "submit_every": 50, "work": {
                "samples": 60000, "join_cost_s": 20,
                # peaks at sqrt(0.9 / 0.02) = 6.7 trainers: 7 beats 8
                "throughput": {"per_trainer": 50, "serial": 0.1, "comm": 0.02}}},
            {**job, "name": "linear", "submit_at": 20, "work": {
                "samples": 40000, "throughput": {"per_trainer": 30}}},
        ]},
    }


def test_the_bound_is_join_cost_plus_work_at_the_curves_peak() -> None:
    bounds = jct_lower_bounds(parse_scenario(_scenario(1), "jct-bound"))
    peak = max(50 * n / (1 + 0.1 * (n - 1) + 0.02 * n * (n - 1)) for n in range(1, 9))
    assert bounds == {
        "peaks-1": pytest.approx(20 + 60000 / peak),
        "peaks-2": pytest.approx(20 + 60000 / peak),
        "linear": pytest.approx(40000 / (8 * 30)),
    }


@pytest.mark.parametrize("nodes", [1, 8])
def test_no_policy_beats_the_bound_and_room_to_spare_comes_close(nodes: int) -> None:
    scenario = parse_scenario(_scenario(nodes), "jct-bound")
    bound = mean_jct_lower_bound(scenario)
    assert bound is not None
    for policy in ("default", "goodput"):
        metrics = run_policy(scenario, policy, 0).metrics
        assert metrics.jct_mean_s is not None and metrics.jct_mean_s >= bound
        if nodes == 8:  # every job at its best at once: only pod start-up stands between
            assert metrics.jct_mean_s <= bound + 15


def test_jobs_without_work_have_no_bound() -> None:
    assert mean_jct_lower_bound(load_scenario("case1")) is None


def test_simulate_bound_reports_the_jct_bound(tmp_path) -> None:
    import json

    import yaml
    from click.testing import CliRunner

    from edl.cli.simulate import simulate_command

    path = tmp_path / "work.yaml"
    path.write_text(yaml.safe_dump(_scenario(8)))
    result = CliRunner().invoke(simulate_command, [str(path), "--bound", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    expected = mean_jct_lower_bound(parse_scenario(_scenario(8), "jct-bound"))
    assert data["jct_mean_bound_s"] == pytest.approx(expected, abs=1e-3)
    assert data["jct_mean_s"] >= data["jct_mean_bound_s"]


def test_the_bound_caps_trainers_at_what_its_nodes_and_quota_admit() -> None:
    """`linear` (max 8 two-core trainers) in a namespace whose quota admits 8 cores: at
    most 4 trainers, never 8; a tainted group it does not tolerate adds no room."""
    data = _scenario(1)
    data["cluster"]["node_groups"].append(
        {"name": "t", "count": 4, "allocatable": {"cpu": "16", "memory": "64Gi"},
         "taints": [{"key": "gpu", "effect": "NoSchedule"}]})
    linear = data["training"]["jobs"][1]
    linear["namespace"] = "lab"
    data["quotas"] = [{"name": "q", "namespace": "lab", "hard": {"requests.cpu": "8"}}]
    bounds = jct_lower_bounds(parse_scenario(data, "jct-bound"))
    assert bounds is not None and bounds["linear"] == pytest.approx(40000 / (4 * 30))
    del data["quotas"]
    data["cluster"]["node_groups"][0]["allocatable"]["cpu"] = "6"  # 3 trainers per node
    bounds = jct_lower_bounds(parse_scenario(data, "jct-bound"))
    assert bounds is not None and bounds["linear"] == pytest.approx(40000 / (3 * 30))
