"""Goodput vs default vs reference vs static on jobs that finish (issue 14).

Two parts, every figure measured in this run:

1. ``mixed-scaling`` (shipped) under every policy on ``--seeds`` seeds (default 10):
   mean and spread (min..max) of JCT, p95 JCT, makespan, utilisation, resizes per
   job-hour, and goodput's ratios to default.
2. Varied scenarios *generated here* from a seed (not shipped, not tuned): random
   clusters, random job mixes drawn from four curve families (flat beyond 8,
   scaling to 60, peaking, small), random priors (true, optimistic linear, none),
   random join costs, Poisson arrivals, with or without a service wave.

Prints markdown tables; ``--out DIR`` also writes PNG plots (JCT per policy, and
goodput/default ratios per scenario). Usage:
``python bench/goodput.py [--seeds 10] [--varied 4] [--out docs/img/goodput]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from edl.sim.metrics import Metrics
from edl.sim.runner import run_policy
from edl.sim.scenario import Scenario, load_scenario, parse_scenario

POLICIES = ("goodput", "default", "reference", "static")
KEYS = (
    "jct_mean_s", "jct_p95_s", "makespan_s", "utilization_pct", "resizes_per_job_hour",
    "service_shortfall_replica_s",
)


def _family(rng: random.Random) -> dict[str, Any]:
    """One job's trainer range, curve and work, from one of four families."""
    kind = rng.choice(["flat", "wide", "peak", "small"])
    rate = rng.uniform(15, 45)
    if kind == "flat":  # flat beyond 8
        points = {1: rate, 2: 1.9 * rate, 4: 3.6 * rate, 8: 6.2 * rate, 16: 6.6 * rate}
        curve: dict[str, Any] = {"points": points}
        low, high = 1, rng.choice([24, 32, 40])
    elif kind == "wide":  # scales to 60
        curve = {"per_trainer": rate, "serial": rng.uniform(0.001, 0.004), "comm": 0.00002}
        low, high = 2, 60
    elif kind == "peak":  # peaks around 20-40
        curve = {"per_trainer": rate, "serial": rng.uniform(0.02, 0.05),
                 "comm": rng.uniform(0.0005, 0.002)}
        low, high = 2, 40
    else:
        curve = {"per_trainer": rate, "serial": rng.uniform(0.0, 0.03)}
        low, high = 1, 12
    prior = rng.choice(["true", "linear", "none"])
    work: dict[str, Any] = {
        # about 400-2400 s at a fair 12 trainers
        "samples": round(rng.uniform(400, 2400) * rate * 8),
        "throughput": curve,
        "join_cost_s": rng.choice([10, 20, 30, 45, 60]),
    }
    if prior == "true":
        work["prior"] = curve
    elif prior == "linear":
        work["prior"] = {"per_trainer": rate}
    trainer = {"min": low, "max": high, "start": low, "static": min(high, 8),
               "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}
    return {"kind": kind, "trainer": trainer, "work": work}


def varied_scenario(seed: int) -> Scenario:
    """A random scenario: cluster, job mix, arrivals and maybe a service wave."""
    return parse_scenario(varied_data(seed), f"varied-{seed}")


def varied_data(seed: int) -> dict[str, Any]:
    """`varied_scenario`'s document, before parsing (other benches add to its jobs)."""
    rng = random.Random(seed)
    nodes = rng.choice([8, 12, 16])
    jobs, at = [], 0.0
    for index in range(rng.randint(10, 18)):
        family = _family(rng)
        jobs.append({
            "name": f"{family['kind']}-{index}",
            "submit_at": round(at),
            "trainer": family["trainer"],
            "pserver": {"count": 1, "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}},
            "master": {"resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}},
            "work": family["work"],
        })
        at += rng.expovariate(1 / 150)
    workloads = []
    if rng.random() < 0.6:
        start = rng.uniform(300, 1500)
        peak = rng.randint(nodes, 3 * nodes)
        workloads.append({
            "name": "web",
            "resources": {"requests": {"cpu": "2", "memory": "2Gi"}},
            "schedule": [{"at": 0, "replicas": 2}, {"at": round(start), "replicas": peak},
                         {"at": round(start + rng.uniform(300, 900)), "replicas": 2}],
        })
    data = {
        "name": f"varied-{seed}",
        "duration_s": 9000,
        "sample_interval_s": 5,
        "measure": {"utilization_until_s": 9000, "steady_state": {"start": 0, "end": 9000}},
        "cluster": {"node_groups": [{"name": "n", "count": nodes,
                                     "allocatable": {"cpu": "16", "memory": "64Gi"}}]},
        "workloads": workloads,
        "training": {"jobs": jobs},
    }
    return data


def _value(metrics: Metrics, key: str) -> float:
    value = getattr(metrics, key)
    return float("nan") if value is None else float(value)


def _spread(values: list[float]) -> str:
    values = [v for v in values if v == v]  # drop NaN (a metric that does not apply)
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.0f}"
    return f"{statistics.fmean(values):.0f} ({min(values):.0f}..{max(values):.0f})"


def run_seeds(
    scenario: Scenario, seeds: list[int], policies: tuple[str, ...], others: int | None = None
) -> dict:
    """Every policy on ``seeds``; policies other than goodput/default on the first
    ``others`` seeds only (they are the slow, known baselines)."""
    out: dict[str, list[Metrics]] = {policy: [] for policy in policies}
    for index, seed in enumerate(seeds):
        for policy in policies:
            if others is not None and index >= others and policy not in ("goodput", "default"):
                continue
            out[policy].append(run_policy(scenario, policy, seed).metrics)
    return out


def seeds_table(name: str, runs: dict[str, list[Metrics]]) -> str:
    lines = [
        f"**{name}**: mean (min..max) over seeds (n = seeds per policy)",
        "",
        "| policy | n | JCT mean (s) | JCT p95 (s) | makespan (s) | util (%) | resizes/job-h "
        "| service shortfall (replica·s) | unfinished | never started | service max lag (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for policy, metrics in runs.items():
        cells = [_spread([_value(m, key) for m in metrics]) for key in KEYS]
        unfinished = sum(len(m.unfinished_names) for m in metrics)
        never = sum(m.jobs_never_started for m in metrics)
        lag = _spread([max(_value(m, "service_max_lag_s") for m in metrics)])
        tail = f" | {unfinished} | {never} | {lag} |"
        lines.append(f"| {policy} | {len(metrics)} | " + " | ".join(cells) + tail)
    if "goodput" in runs and "default" in runs:
        ratios = []
        for key in ("jct_mean_s", "makespan_s", "resizes_per_job_hour"):
            per_seed = [
                _value(g, key) / _value(d, key)
                for g, d in zip(runs["goodput"], runs["default"], strict=True)
            ]
            ratios.append(f"{key} {statistics.fmean(per_seed):.2f} "
                          f"({min(per_seed):.2f}..{max(per_seed):.2f})")
        lines += ["", "goodput / default per seed: " + "; ".join(ratios)]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, dict[str, list[Metrics]]], out: Path, group: str) -> list[Path]:
    """Bar charts of ``results`` as ``out/goodput-<group>-<metric>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, label in (("jct_mean_s", "mean JCT (s)"), ("makespan_s", "makespan (s)"),
                       ("resizes_per_job_hour", "resizes per job-hour")):
        figure, axes = plt.subplots(figsize=(8.0, 3.6))
        names = list(results)
        width = 0.8 / len(POLICIES)
        for p_index, policy in enumerate(POLICIES):
            means = [statistics.fmean(_value(m, key) for m in results[n][policy])
                     if policy in results[n] else 0.0 for n in names]
            axes.bar([i + p_index * width for i in range(len(names))], means, width,
                     label=policy)
        axes.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names,
                        fontsize="small", rotation=15)
        axes.set_ylabel(label)
        axes.set_title(f"{label} by policy (mean over seeds)")
        axes.grid(alpha=0.3, axis="y")
        axes.legend(fontsize="small")
        figure.tight_layout()
        path = out / f"goodput-{group}-{key.removesuffix('_s').replace('_', '-')}.png"
        figure.savefig(path, dpi=80, metadata={"Software": None})
        plt.close(figure)
        paths.append(path)
    return paths


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--varied", type=int, default=4)
    parser.add_argument("--others", type=int, default=3,
                        help="seeds for reference and static on mixed-scaling")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results: dict[str, dict[str, list[Metrics]]] = {}
    if args.seeds > 0:  # --seeds 0: the generated scenarios only
        mixed = load_scenario("mixed-scaling")
        results["mixed-scaling"] = run_seeds(
            mixed, list(range(args.seeds)), POLICIES, args.others
        )
        print(seeds_table("mixed-scaling", results["mixed-scaling"]), flush=True)
    for index in range(args.varied):
        scenario = varied_scenario(1000 + index)
        results[scenario.name] = run_seeds(scenario, [0], POLICIES)
        print(seeds_table(scenario.name, results[scenario.name]), flush=True)
    wins = [
        _value(r["goodput"][0], "jct_mean_s") / _value(r["default"][0], "jct_mean_s")
        for name, r in results.items() if name != "mixed-scaling"
    ]
    if wins:
        print(f"varied scenarios: goodput/default mean JCT {statistics.fmean(wins):.2f} "
              f"(min {min(wins):.2f}, max {max(wins):.2f}) over {len(wins)} scenarios")
    if args.out is not None:
        groups = {
            "mixed-scaling": {k: v for k, v in results.items() if k == "mixed-scaling"},
            "varied": {k: v for k, v in results.items() if k != "mixed-scaling"},
        }
        for group, chosen in groups.items():
            for path in plot(chosen, args.out, group) if chosen else []:
                print(f"wrote {path}")
    print(f"bench wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
