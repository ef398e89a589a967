"""Goodput with batch adaptation vs default on `mixed-scaling` with noise scales (issue 22).

Every job of the shipped `mixed-scaling` declares an initial and a largest batch and a
gradient noise scale that rises over its work (docs/simulation.md). Variants, every
figure measured in this run on the same seeds:

* ``default``: fair shares; each job keeps its declared per-trainer batch, so its
  total batch grows with its trainers and its statistical efficiency falls;
* ``goodput``: trainers and batch chosen together by goodput (both parts);
* ``allocation alone``: `goodput`'s allocation valuing jobs by the goodput of their
  declared per-trainer batch, which it does not change (``adapt_batch=False``);
* ``batch alone``: `default`'s allocation, each job given the best batch for the
  trainers `default` gave it (`edl.policy.batching`, the same 5 % rule);
* ``goodput, throughput only``: issue 14's `goodput`, blind to the batch (the jobs'
  batch bounds hidden from it).

It also prints the JCT bound (each job alone at its best goodput, with and without
batch adaptation, `edl.sim.jct_bound`). ``--out DIR`` writes a PNG of mean JCT per
variant. ``--varied N``: also ``goodput`` against ``default`` on N generated scenarios
(`bench/goodput.py`'s generator, seeds 3000.., neither its tuning nor its reporting
seeds) whose every job is given a batch range and a rising noise scale
(`noisy_varied_scenario`), so a change is not judged on `mixed-scaling` alone.
Usage: ``python bench/goodput_batch.py [--seeds 10] [--parts 3] [--varied 3] [--out docs/img]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from edl.accounting.types import ClusterResource
from edl.policy import Decision, JobView, Policy
from edl.policy.batching import with_batch
from edl.policy.default import DefaultPolicy
from edl.policy.goodput import GoodputPolicy
from edl.policy.marginal import GoodputParams
from edl.sim.jct_bound import mean_jct_lower_bound
from edl.sim.metrics import Metrics
from edl.sim.runner import run_policy
from edl.sim.scenario import Scenario, load_scenario, parse_scenario
from edl.throughput.batch import GoodputCurve
from goodput import varied_data

BATCH_GAIN = GoodputParams().batch_gain


class DefaultWithBatch(DefaultPolicy):
    """`default`'s trainers, each adapting job at the best batch for them."""

    def plan_with_placement(
        self, jobs: Sequence[JobView], resources: ClusterResource, max_load_desired: float
    ) -> tuple[list[Decision], dict[tuple[str, str], list[str]]]:
        decisions, placement = super().plan_with_placement(jobs, resources, max_load_desired)
        views = {view.key: view for view in jobs}
        out = []
        for decision in decisions:
            view = views.get((decision.namespace, decision.name))
            scaling = view.scaling if view is not None else None
            if scaling is None or scaling.batch_limits is None or scaling.noise_scale is None:
                out.append(decision)
                continue
            curve = GoodputCurve(scaling.curve, scaling.batch_limits, scaling.noise_scale,
                                 scaling.compute_rate)
            out.append(with_batch(decision, curve, scaling.batch, BATCH_GAIN))
        return out, placement


class ThroughputOnly(GoodputPolicy):
    """Issue 14's `goodput`: the jobs' batch bounds are hidden from it."""

    def plan_with_placement(
        self, jobs: Sequence[JobView], resources: ClusterResource, max_load_desired: float
    ) -> tuple[list[Decision], dict[tuple[str, str], list[str]]]:
        hidden = [
            dataclasses.replace(
                view, scaling=dataclasses.replace(view.scaling, batch_limits=None)
            ) if view.scaling is not None else view
            for view in jobs
        ]
        return super().plan_with_placement(hidden, resources, max_load_desired)


VARIANTS: dict[str, tuple[str, type[Policy] | None, GoodputParams | None]] = {
    "default": ("default", None, None),
    "goodput": ("goodput", None, None),
    "allocation alone": ("goodput", GoodputPolicy, GoodputParams(adapt_batch=False)),
    "batch alone": ("default", DefaultWithBatch, None),
    "goodput, throughput only": ("goodput", ThroughputOnly, None),
}
MAIN = ("goodput", "default")
VARIED_SEEDS = 3000


def noisy_varied_scenario(seed: int) -> Scenario:
    """`bench/goodput.py`'s generated scenario ``seed`` with every job adapting its batch:
    a per-trainer batch of 32-128 at its start count, a largest batch 16-64 times the
    initial one, and a noise scale rising 5-15-fold from 2-6 times the initial batch
    (the shape `mixed-scaling`'s jobs have; drawn from a stream of their own, so the
    jobs, curves and arrivals are the generator's)."""
    data = varied_data(seed)
    rng = random.Random(f"noise-{seed}")
    for job in data["training"]["jobs"]:
        initial = rng.choice([32, 64, 128]) * job["trainer"]["start"]
        start = round(initial * rng.uniform(2.0, 6.0))
        job["work"].update(
            initial_batch=initial,
            max_batch=initial * rng.choice([16, 32, 64]),
            noise_scale={"start": start, "end": round(start * rng.uniform(5.0, 15.0))},
        )
    data["name"] = f"varied-noisy-{seed}"
    return parse_scenario(data, data["name"])


def varied_table(runs: dict[str, dict[str, Metrics]]) -> str:
    """One row per generated scenario: goodput and default, and their ratios."""
    lines = [
        "| scenario | goodput JCT (s) | default JCT (s) | JCT / default "
        "| makespan / default | resizes / default | unfinished (goodput, default) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    def ratio(ours: float | None, base: float | None) -> str:
        return "-" if ours is None or not base else f"{ours / base:.2f}"

    for name, pair in runs.items():
        g, d = pair["goodput"], pair["default"]
        lines.append(
            f"| {name} | {g.jct_mean_s or 0:.0f} | {d.jct_mean_s or 0:.0f} "
            f"| {ratio(g.jct_mean_s, d.jct_mean_s)} | {ratio(g.makespan_s, d.makespan_s)} "
            f"| {ratio(g.resizes_per_job_hour, d.resizes_per_job_hour)} "
            f"| {len(g.unfinished_names)}, {len(d.unfinished_names)} |"
        )
    return "\n".join(lines)


def _planner(name: str) -> Policy | None:
    _, kind, params = VARIANTS[name]
    if kind is None:
        return None
    if params is not None:
        return kind(params)  # type: ignore[call-arg]
    return kind()


def _spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.0f}"
    return f"{statistics.fmean(values):.0f} ({min(values):.0f}..{max(values):.0f})"


def table(runs: dict[str, list[Metrics]]) -> str:
    lines = [
        "| variant | n | JCT mean (s) | JCT p95 (s) | makespan (s) | resizes/job-h "
        "| JCT / default | makespan / default | resizes / default | unfinished | never started |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = runs["default"]
    for name, metrics in runs.items():
        if not metrics:  # not run (``--parts 0``)
            continue
        def ratio(key: str, ms: list[Metrics] = metrics) -> str:
            per = [getattr(m, key) / getattr(d, key) for m, d in zip(ms, base, strict=False)]
            return _spread_ratio(per)

        cells = [
            _spread([m.jct_mean_s for m in metrics]),
            _spread([m.jct_p95_s for m in metrics]),
            _spread([m.makespan_s for m in metrics]),
            _spread([m.resizes_per_job_hour for m in metrics]),
            ratio("jct_mean_s"), ratio("makespan_s"), ratio("resizes_per_job_hour"),
            str(sum(len(m.unfinished_names) for m in metrics)),
            str(sum(m.jobs_never_started for m in metrics)),
        ]
        lines.append(f"| {name} | {len(metrics)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _spread_ratio(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ({min(values):.2f}..{max(values):.2f})"


def plot(runs: dict[str, list[Metrics]], bounds: tuple[float, float], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(8.0, 3.6))
    names = [name for name in runs if runs[name]]
    means = [statistics.fmean(m.jct_mean_s for m in runs[n]) for n in names]
    axes.bar(range(len(names)), means, color="tab:blue")
    axes.axhline(bounds[0], color="tab:green", linestyle="--",
                 label=f"bound, batch adapted ({bounds[0]:.0f} s)")
    axes.axhline(bounds[1], color="tab:orange", linestyle=":",
                 label=f"bound, per-trainer batch kept ({bounds[1]:.0f} s)")
    axes.axhline(0.7 * means[names.index("default")], color="tab:red", linestyle="-.",
                 label="0.70 x default")
    axes.set_xticks(range(len(names)), names, fontsize="small", rotation=12)
    axes.set_ylabel("mean JCT (s)")
    axes.set_title("mixed-scaling with noise scales: mean JCT (mean over seeds)")
    axes.grid(alpha=0.3, axis="y")
    axes.legend(fontsize="x-small", loc="lower right")
    figure.tight_layout()
    path = out / "goodput-batch-jct-mean.png"
    figure.savefig(path, dpi=80, metadata={"Software": None})
    plt.close(figure)
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10, help="seeds for goodput and default")
    parser.add_argument("--parts", type=int, default=3, help="seeds for the other variants")
    parser.add_argument("--varied", type=int, default=0,
                        help="generated scenarios with noise scales (goodput vs default)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    scenario = load_scenario("mixed-scaling")
    adapted = mean_jct_lower_bound(scenario)
    fixed = mean_jct_lower_bound(scenario, adapt_batch=False)
    assert adapted is not None and fixed is not None
    print(f"JCT bound (each job alone at its best goodput): batch adapted {adapted:.0f} s, "
          f"per-trainer batch kept {fixed:.0f} s", flush=True)
    runs: dict[str, list[Metrics]] = {name: [] for name in VARIANTS}
    for seed in range(args.seeds):
        for name in VARIANTS:
            if name not in MAIN and seed >= args.parts:
                continue
            policy = VARIANTS[name][0]
            metrics = run_policy(scenario, policy, seed, planner=_planner(name)).metrics
            runs[name].append(metrics)
            print(f"seed {seed} {name}: JCT {metrics.jct_mean_s:.0f} s, makespan "
                  f"{metrics.makespan_s:.0f} s, resizes/job-h "
                  f"{metrics.resizes_per_job_hour:.1f}", flush=True)
    print()
    print(table(runs))
    default_jct = statistics.fmean(m.jct_mean_s for m in runs["default"])
    print(f"\nbound / default mean JCT: batch adapted {adapted / default_jct:.2f}, "
          f"per-trainer batch kept {fixed / default_jct:.2f}")
    varied: dict[str, dict[str, Metrics]] = {}
    for seed in range(VARIED_SEEDS, VARIED_SEEDS + args.varied):
        generated = noisy_varied_scenario(seed)
        varied[generated.name] = {
            policy: run_policy(generated, policy, 0).metrics for policy in MAIN
        }
        print(f"{generated.name}: " + ", ".join(
            f"{policy} JCT {m.jct_mean_s or 0:.0f} s, "
            f"resizes/job-h {m.resizes_per_job_hour or 0:.1f}"
            for policy, m in varied[generated.name].items()), flush=True)
    if varied:
        print()
        print(varied_table(varied))
    if args.out is not None:
        print(f"wrote {plot(runs, (adapted, fixed), args.out)}")
    print(f"bench wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
