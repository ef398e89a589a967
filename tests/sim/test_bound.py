"""The packing bound of the steady window (`edl.sim.bound`)."""

from __future__ import annotations

from typing import Any

import pytest

from edl.sim.bound import steady_utilization_bound
from edl.sim.runner import run_policy
from edl.sim.scenario import load_scenario, parse_scenario


def scenario(trainer_cpu: str, load: float = 1.0, most: int = 10):
    data: dict[str, Any] = {
        "name": "bound",
        "duration_s": 120,
        "autoscaler": {"max_load_desired": load},
        "measure": {"utilization_until_s": 100, "steady_state": {"start": 60, "end": 100}},
        "cluster": {"node_groups": [
            {"name": "n", "count": 2, "allocatable": {"cpu": "10", "memory": "64Gi"}}
        ]},
        "training": {"jobs": [{
            "name": "j", "submit_at": 0,
            "trainer": {"min": 1, "max": most, "resources": {"requests": {"cpu": trainer_cpu}}},
            "pserver": {"count": 1, "resources": {"requests": {"cpu": "2"}}},
            "master": {"resources": {"requests": {"cpu": "1"}}},
        }]},
    }
    return parse_scenario(data, "bound")


def test_whole_pods_per_node_not_aggregate_cores() -> None:
    # 2 nodes x 10 cores, a 2-core pserver and a master of 1 core + its etcd sidecar's
    # 0.1; 4-core trainers: (master + 2 trainers) + (pserver + 2 trainers) -> 19.1 cores
    assert steady_utilization_bound(scenario("4")) == pytest.approx(95.5)
    # 3-core trainers: (master + pserver + 2 trainers) + (3 trainers) -> 18.1, never 20
    assert steady_utilization_bound(scenario("3")) == pytest.approx(90.5)


def test_holes_smaller_than_a_trainer_count_for_nothing() -> None:
    # 1.2-core trainers (under an eighth of a node): (master + 7) + (pserver + 6) ->
    # 18.7 cores; pooling them over both nodes' room would count 14 (19.9 cores)
    assert steady_utilization_bound(scenario("1.2", most=20)) == pytest.approx(93.5)


def test_max_load_caps_the_bound() -> None:
    # 16 of 20 cores may be requested: master (with etcd) + pserver + 12 one-core trainers
    assert steady_utilization_bound(scenario("1", load=0.8, most=20)) == pytest.approx(75.5)
    # ...and max-instance caps it too: 3.1 + 10 cores
    assert steady_utilization_bound(scenario("1", load=0.8)) == pytest.approx(65.5)


def test_case1_matches_the_exact_per_node_program() -> None:
    # bench/simulate.py --bound solves case 1 exactly (patterns of all kinds): 91.16 %;
    # with each master's etcd sidecar (0.1 core, which that program leaves out) 91.25 %
    assert steady_utilization_bound(load_scenario("case1")) == pytest.approx(91.25, abs=0.01)


@pytest.mark.parametrize("placement", ["spread", "binpack"])
@pytest.mark.parametrize("policy", ["default", "reference", "static"])
def test_no_run_beats_the_bound(policy: str, placement: str) -> None:
    s = scenario("3").model_copy(update={"placement": placement})
    steady = run_policy(s, policy, 0).metrics.steady_utilization_pct
    assert steady is not None and steady <= steady_utilization_bound(s) + 1e-6


def test_taints_selectors_and_quotas_bound_what_pods_reach() -> None:
    """A tainted node no pod tolerates adds nothing; a trainer selecting one node group
    packs there only; a namespace quota scoped to the trainers' PriorityClass caps them."""
    data = scenario("2", most=20).model_dump(mode="json", exclude_none=True)
    groups = data["cluster"]["node_groups"]
    groups.append({"name": "t", "count": 1, "allocatable": {"cpu": "10", "memory": "64Gi"},
                   "taints": [{"key": "gpu", "effect": "NoSchedule"}]})
    # 30 cores; the tainted 10 out of reach: 2 + 1.1 + 8 two-core trainers = 19.1 of 30
    assert steady_utilization_bound(parse_scenario(data, "t")) == pytest.approx(100 * 19.1 / 30)
    groups[0]["labels"] = {"pool": "a"}
    job = data["training"]["jobs"][0]
    job["scheduling"] = {"node_selector": {"pool": "a"}, "priority_class": "low"}
    data["priority_classes"] = [{"name": "low", "value": -10}]
    data["quotas"] = [{"name": "q", "hard": {"requests.cpu": "8"}, "priority_classes": ["low"]}]
    # trainers capped at 4 by the quota (pserver and master are not of its class)
    assert steady_utilization_bound(parse_scenario(data, "t")) == pytest.approx(100 * 11.1 / 30)


def test_per_pool_bound_counts_only_what_may_run_there() -> None:
    """The tainted pool only a service tolerates: its bound is what the service fills;
    the open pool's is what the job can pack there."""
    from edl.sim.bound import steady_utilization_bound_by_pool

    data = scenario("2", most=20).model_dump(mode="json", exclude_none=True)
    data["cluster"]["node_groups"].append(
        {"name": "t", "count": 1, "allocatable": {"cpu": "10", "memory": "64Gi"},
         "taints": [{"key": "gpu", "effect": "NoSchedule"}]})
    data["workloads"] = [{"name": "svc", "resources": {"requests": {"cpu": "3"}},
                          "scheduling": {"tolerations": [{"key": "gpu", "operator": "Exists"}],
                                         "node_selector": {}},
                          "schedule": [{"at": 0, "replicas": 2}]}]
    pools = steady_utilization_bound_by_pool(parse_scenario(data, "t"))
    # n: (master 1.1 + pserver 2 + 3 trainers) + (5 trainers) = 19.1 of 20 cores
    assert pools == {"n": pytest.approx(95.5), "t": pytest.approx(60.0)}
