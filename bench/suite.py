"""Every policy on every shipped scenario, one table (and a PNG) — `bench/simulate.py --suite`.

Per scenario, placement (spread, binpack) and policy (static, reference, default):
utilisation up to `measure.utilization_until_s`, steady-state utilisation, the
packing bound of the steady window (`edl.sim.bound`; empty when the source tree
predates it), Jain's index, mean pending time, jobs never started, the longest
service lag and the service shortfall (Σ over samples of desired − running
replicas of every other workload x the sample interval, in replica-seconds: a
service stuck at 85 % of its target shows here while its lag only says "never").
Means over SEEDS seeds. Run against another source tree (e.g. the commit before a
change) with PYTHONPATH=<tree>/src to measure "before" with the same scenarios.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from edl.sim.runner import run_policy
from edl.sim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "src" / "edl" / "scenarios"
POLICIES = ("static", "reference", "default")
PLACEMENTS = ("spread", "binpack")


def shortfall(timeline: Any, interval: float) -> float:
    """Σ over samples and workloads of max(0, desired − running) x sample interval."""
    total = 0
    for series in timeline.workloads.values():
        total += sum(max(0, d - r) for d, r in zip(series.desired, series.running, strict=True))
    return total * interval


def bound(scenario: Any) -> float | None:
    try:
        from edl.sim.bound import steady_utilization_bound
    except ImportError:
        return None
    return steady_utilization_bound(scenario)


def run(names: list[str], seeds: int) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        base = load_scenario(SCENARIOS / f"{name}.yaml")
        limit = bound(base)
        for placement in PLACEMENTS:
            scenario = base.model_copy(update={"placement": placement})
            for policy in POLICIES:
                runs = [run_policy(scenario, policy, seed) for seed in range(seeds)]
                metrics = [r.metrics.as_json() for r in runs]

                def mean(key: str, metrics: list[dict[str, Any]] = metrics) -> float | None:
                    values = [m[key] for m in metrics if m[key] is not None]
                    return statistics.fmean(values) if values else None

                rows.append({
                    "scenario": name,
                    "placement": placement,
                    "policy": policy,
                    "util": mean("utilization_pct"),
                    "steady": mean("steady_utilization_pct"),
                    "bound": limit,
                    "jain": mean("jain_fairness"),
                    "pending": mean("avg_pending_s"),
                    "never": mean("jobs_never_started"),
                    "lag": mean("service_max_lag_s"),
                    "shortfall": statistics.fmean(
                        shortfall(r.timeline, scenario.sample_interval_s) for r in runs
                    ),
                })
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def _fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| scenario | placement | policy | util (%) | steady (%) | bound (%) | "
            "steady / bound | Jain | pending (s) | never started | service lag (s) | "
            "shortfall (replica·s) |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        ratio = (
            None if r["bound"] is None or r["steady"] is None else 100 * r["steady"] / r["bound"]
        )
        lines.append(
            f"| {r['scenario']} | {r['placement']} | {r['policy']} | {_fmt(r['util'])} | "
            f"{_fmt(r['steady'])} | {_fmt(r['bound'])} | {_fmt(ratio)} % | "
            f"{_fmt(r['jain'], 3)} | {_fmt(r['pending'])} | {_fmt(r['never'], 0)} | "
            f"{_fmt(r['lag'], 0)} | {_fmt(r['shortfall'], 0)} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Steady utilisation per scenario and policy (spread placement), bound dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spread = [r for r in rows if r["placement"] == "spread"]
    names = list(dict.fromkeys(r["scenario"] for r in spread))
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.25
    for i, policy in enumerate(POLICIES):
        mine = {r["scenario"]: r["steady"] or 0 for r in spread if r["policy"] == policy}
        values = [mine.get(n, 0) for n in names]
        ax.bar([x + (i - 1) * width for x in range(len(names))], values, width, label=policy)
    for x, n in enumerate(names):
        limit = next(r["bound"] for r in spread if r["scenario"] == n)
        if limit is not None:
            ax.hlines(limit, x - 1.5 * width, x + 1.5 * width, colors="k", linestyles="dashed")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("steady-state CPU utilisation (%)")
    ax.set_ylim(0, 100)
    ax.set_title("steady utilisation by policy (spread placement); dashed: packing bound")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str]) -> None:
    seeds = int(argv[0]) if argv else 1
    names = argv[1].split(",") if len(argv) > 1 else sorted(
        p.stem for p in SCENARIOS.glob("*.yaml")
    )
    rows = run(names, seeds)
    print(table(rows))
    if len(argv) > 2:
        plot(rows, Path(argv[2]))
        Path(argv[2]).with_suffix(".json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
