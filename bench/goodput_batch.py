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
variant. Usage: ``python bench/goodput_batch.py [--seeds 10] [--parts 3] [--out docs/img]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from edl.accounting.types import ClusterResource
from edl.policy import Decision, JobView, Policy
from edl.policy.batching import with_batch
from edl.policy.default import DefaultPolicy
from edl.policy.goodput import GoodputPolicy
from edl.policy.marginal import GoodputParams
from edl.sim.jct_bound import mean_jct_lower_bound
from edl.sim.metrics import Metrics
from edl.sim.runner import run_policy
from edl.sim.scenario import load_scenario
from edl.throughput.batch import GoodputCurve

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
    names = list(runs)
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
    if args.out is not None:
        print(f"wrote {plot(runs, (adapted, fixed), args.out)}")
    print(f"bench wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
