"""Wall time of `edl simulate`: case1, and a 1,000-node, 200-job, one-hour scenario.

Prints each figure with its target and the ratio (wall / target; below 1 is good).
Run: .venv/bin/python bench/simulate.py

``--experiment [SEEDS] [--trainers managed|job]`` instead reproduces the 2017 experiment
as the original ran it: case1 and case2, every policy, SEEDS runs each (default 10),
under both scheduler placements; prints a markdown table of the means (min-max in
brackets). ``--trainers job`` runs the trainer Job by the Job controller (the design
before issue 10, on the faithful model) instead of edl's controller.

``--suite [SEEDS [SCENARIOS [PNG]]]`` runs every policy on every shipped scenario
under both placements and prints one markdown table (bench/suite.py).

``--bound`` prints the best steady-state CPU utilisation any plan and any placement
could reach in case1 and case2 (an integer program over per-node packings, CPU only:
memory never binds there), to judge the utilisation targets.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from edl.sim.runner import run_policy, simulate
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


def measure(scenario: Scenario, policy: str, repeats: int) -> tuple[float, dict[str, object]]:
    """Median wall time of ``repeats`` runs (imports are warmed up beforehand)."""
    walls = []
    for _ in range(repeats):
        started = time.perf_counter()
        [run] = simulate(scenario, [policy], seed=0, progress=False)
        walls.append(time.perf_counter() - started)
    return statistics.median(walls), run.metrics.as_json()


EXPERIMENT_KEYS = (
    ("avg_pending_s", "pending (s)"),
    ("utilization_pct", "util ≤ 550 s (%)"),
    ("steady_utilization_pct", "steady util (%)"),
    ("jain_fairness", "Jain"),
    ("jobs_never_started", "never started"),
    ("service_max_lag_s", "service lag (s)"),
)


def _cell(values: list[Any]) -> str:
    numbers = [value for value in values if value is not None]
    if not numbers:
        return "n/a"
    middle = statistics.fmean(numbers)
    low, high = min(numbers), max(numbers)
    if low == high:
        return f"{middle:.3g}" if middle < 10 else f"{middle:.1f}"
    return f"{middle:.3g} [{low:.3g}–{high:.3g}]" if middle < 10 else (
        f"{middle:.1f} [{low:.1f}–{high:.1f}]"
    )


def experiment(seeds: int, trainers: str = "managed") -> None:
    """The original ran each case 10 times ON and OFF; so do we, for every policy."""
    labels = [label for _, label in EXPERIMENT_KEYS]
    header = ["case", "placement", "policy", *labels, "service targets reached"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in ("case1", "case2"):
        base = load_scenario(name)
        for placement in ("spread", "binpack"):
            scenario = base.model_copy(update={"placement": placement})
            for policy in ("static", "reference", "default"):
                runs = [
                    run_policy(scenario, policy, seed, trainer_workload=trainers).metrics.as_json()
                    for seed in range(seeds)
                ]
                cells = [_cell([run[key] for run in runs]) for key, _ in EXPERIMENT_KEYS]
                reached = [run["service_targets_reached"] for run in runs]
                hits = "n/a" if reached[0] is None else f"{sum(bool(r) for r in reached)}/{seeds}"
                print(f"| {name} | {placement} | {policy} | " + " | ".join(cells) + f" | {hits} |")


def _milli(quantity: object) -> int:
    from edl.api.quantity import cpu_milli

    return cpu_milli(str(quantity))


def packing_bound(scenario: Scenario, service_replicas: int) -> tuple[int, float]:
    """Most trainers (and the utilisation, %) with every job's pservers and master placed.

    One job group and at most one other workload; node room is allocatable minus the
    per-node background pods; trainers are capped by max-instance and max_load_desired.
    """
    import itertools

    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    [group] = scenario.training.jobs
    assert group.trainer and group.pserver and group.master
    per_node = sum(
        _milli(pods.resources.requests.cpu) for pods in scenario.cluster.background_pods
        if pods.per_node
    )
    nodes = [(g.count, _milli(g.allocatable.cpu)) for g in scenario.cluster.node_groups]
    trainer = _milli(group.trainer.resources.requests.cpu)
    shapes = [trainer, _milli(group.pserver.resources.requests.cpu),
              _milli(group.master.resources.requests.cpu)]
    demand = [None, group.pserver.count * group.count, group.count]  # pods to place
    if scenario.workloads:
        shapes.append(_milli(scenario.workloads[0].resources.requests.cpu))
        demand.append(service_replicas)
    patterns = []  # (node group, pods of each shape)
    for kind, (_, cpu) in enumerate(nodes):
        room = cpu - per_node
        ranges = [range(room // shape + 1) for shape in shapes]
        for counts in itertools.product(*ranges):
            if sum(c * shape for c, shape in zip(counts, shapes, strict=True)) <= room:
                patterns.append((kind, counts))
    rows, low, high = [], [], []
    for kind, (count, _) in enumerate(nodes):
        rows.append([1 if k == kind else 0 for k, _ in patterns])
        low.append(0)
        high.append(count)
    for index in range(1, len(shapes)):
        rows.append([counts[index] for _, counts in patterns])
        low.append(demand[index])
        high.append(demand[index])
    total = sum(count * cpu for count, cpu in nodes)
    fixed = sum(count for count, _ in nodes) * per_node + sum(
        shapes[i] * demand[i] for i in range(1, len(shapes))
    )
    cap = int((total * scenario.autoscaler.max_load_desired - fixed) // trainer)
    rows.append([counts[0] for _, counts in patterns])
    low.append(0)
    high.append(min(cap, group.trainer.max * group.count))
    result = milp(
        -np.array([counts[0] for _, counts in patterns], dtype=float),
        constraints=LinearConstraint(np.array(rows), low, high),
        integrality=np.ones(len(patterns)),
        bounds=Bounds(0, np.inf),
    )
    trainers = round(-result.fun)
    return trainers, 100 * (fixed + trainers * trainer) / total


def bound() -> None:
    case1 = load_scenario("case1")
    trainers, util = packing_bound(case1, 0)
    print(f"case1, all 20 jobs placed: at most {trainers} trainers -> {util:.2f} % CPU")
    case2 = load_scenario("case2")
    for replicas in (400, 300, 200, 100):
        trainers, util = packing_bound(case2, replicas)
        print(f"case2, nginx {replicas}: at most {trainers} trainers -> {util:.2f} % CPU")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--suite":
        import suite  # bench/suite.py, beside this file

        suite.main(sys.argv[2:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--bound":
        bound()
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--experiment":
        args = sys.argv[2:]
        trainers = "managed"
        if "--trainers" in args:
            at = args.index("--trainers")
            trainers = args[at + 1] if at + 1 < len(args) else ""
            del args[at:at + 2]
            if trainers not in ("managed", "job"):
                sys.exit("bench/simulate.py: --trainers must be managed or job")
        experiment(int(args[0]) if args else 10, trainers)
        return
    # Warm-up (imports, caches): the first 60 s of case1 under each policy.
    warm_up = load_scenario("case1").model_copy(update={"duration_s": 60.0})
    for policy in ("static", "default"):
        simulate(warm_up, [policy])
    for label, scenario, target, repeats in (
        ("case1", load_scenario("case1"), CASE1_TARGET_S, 3),
        ("1000 nodes, 200 jobs, 1 h", large_scenario(), LARGE_TARGET_S, 1),
    ):
        walls = {}
        for policy in ("static", "default"):
            wall, metrics = measure(scenario, policy, repeats)
            walls[policy] = wall
            print(
                f"simulate {label:<26} policy={policy:<8} wall {wall:6.2f} s  "
                f"target {target:4.0f} s  ratio {wall / target:.2f}  "
                f"(virtual {scenario.duration_s:.0f} s = {scenario.duration_s / wall:.0f}x "
                f"real time; util {metrics['utilization_pct']} %)"
            )
        # baseline from the same run: the control plane alone (static: no Autoscaler)
        print(
            f"simulate {label:<26} autoscaler cost: default / static wall = "
            f"{walls['default'] / walls['static']:.1f}x"
        )


if __name__ == "__main__":
    main()
