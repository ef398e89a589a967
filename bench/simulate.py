"""Wall time of `edl simulate`: case1, and a 1,000-node, 200-job, one-hour scenario.

Prints each figure with its target and the ratio (wall / target; below 1 is good).
Run: .venv/bin/python bench/simulate.py
"""

from __future__ import annotations

import time
from typing import Any

from edl.sim.runner import simulate
from edl.sim.scenario import Scenario, load_scenario, parse_scenario

CASE1_TARGET_S = 5.0
LARGE_TARGET_S = 60.0


def large_scenario() -> Scenario:
    """1,000 nodes, 200 elastic jobs over one hour, and a service that breathes."""
    resources = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "3", "memory": "4Gi"}}
    data: dict[str, Any] = {
        "name": "large",
        "duration_s": 3600,
        "sample_interval_s": 5,
        "measure": {"utilization_until_s": 3600, "steady_state": {"start": 1800, "end": 3000}},
        "cluster": {
            "node_groups": [
                {"name": "small", "count": 600, "allocatable": {"cpu": "16", "memory": "64Gi"}},
                {"name": "large", "count": 400, "allocatable": {"cpu": "32", "memory": "128Gi"}},
            ],
            "background_pods": [
                {"name": "system", "per_node": True,
                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            ],
        },
        "workloads": [
            {
                "name": "web",
                "resources": {"requests": {"cpu": "4", "memory": "4Gi"}},
                "schedule": [
                    {"at": 0, "replicas": 1500},
                    {"at": 900, "replicas": 800},
                    {"at": 1800, "replicas": 400},
                    {"at": 2700, "replicas": 1200},
                ],
            }
        ],
        "training": {
            "jobs": [
                {
                    "name": "job-{i}",
                    "count": 200,
                    "submit_at": 10,
                    "submit_every": 6,
                    "delete_at": 2400,
                    "delete_every": 5,
                    "trainer": {"min": 2, "max": 40, "static": 20, "resources": resources},
                    "pserver": {"count": 4, "resources": resources},
                    "master": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                }
            ]
        },
    }
    return parse_scenario(data, "large")


def measure(scenario: Scenario, policy: str) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    [run] = simulate(scenario, [policy], seed=0, progress=False)
    return time.perf_counter() - started, run.metrics.as_json()


def main() -> None:
    for label, scenario, target in (
        ("case1", load_scenario("case1"), CASE1_TARGET_S),
        ("1000 nodes, 200 jobs, 1 h", large_scenario(), LARGE_TARGET_S),
    ):
        for policy in ("default", "static"):
            wall, metrics = measure(scenario, policy)
            print(
                f"simulate {label:<26} policy={policy:<8} wall {wall:6.2f} s  "
                f"target {target:4.0f} s  ratio {wall / target:.2f}  "
                f"(virtual {scenario.duration_s:.0f} s = {scenario.duration_s / wall:.0f}x "
                f"real time; util {metrics['utilization_pct']} %)"
            )


if __name__ == "__main__":
    main()
