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

Resize pauses (issue 32): ``--pauses`` runs ``goodput`` and ``default`` again with every
job's resizes stopping it for a pause drawn per resize (`work.resize_pause_s`): ``live``
0.12-0.20 s (a live collective job's re-formation as measured), ``restart`` 19-59 s (a
restart relaunching every worker, as measured at load 9-23); a live job takes a chosen
batch at its next step boundary, a restart job when its world next re-forms for a
resize (``batch_change``: ``step``, ``restart``). Every scenario's row also
gives the fluid optimum (`bench/jct_fluid.py`: free resizes, exact curves and φ, the
best rule at the best batch, over the fluid model's `default` rule with the declared
batch), so ``goodput``'s ratio to ``default`` is read against what a rule could reach.
The generated scenarios run with the first mode of ``--pauses``.
Usage: ``python bench/goodput_batch.py [--seeds 10] [--parts 3] [--varied 3]
[--pauses none,live,restart] [--out docs/img]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.resources
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import yaml

import jct_fluid
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
PAUSES: dict[str, tuple[float, float] | None] = {
    "none": None, "live": (0.12, 0.20), "restart": (19.0, 59.0),
}
# when each mode's job takes a chosen batch, as its runtime does: a live world at its
# next step boundary (`edl.elastic`), a torchrun job's next round (a resize re-forms it)
BATCH_CHANGE = {"live": "step", "restart": "restart"}


def with_pauses(data: dict, mode: str) -> Scenario:
    """The scenario document with every job's resizes pausing it as ``mode`` says."""
    data = {**data, "training": {**data["training"], "jobs": [dict(j) for j in
                                                             data["training"]["jobs"]]}}
    pause = PAUSES[mode]
    for job in data["training"]["jobs"]:
        job["work"] = dict(job["work"])
        if pause is not None:
            job["work"]["resize_pause_s"] = {"min": pause[0], "max": pause[1]}
            job["work"]["batch_change"] = BATCH_CHANGE[mode]
    name = data["name"] if pause is None else f"{data['name']} ({mode} pauses)"
    return parse_scenario({**data, "name": name}, name)


def shipped_data(name: str) -> dict:
    text = (importlib.resources.files("edl.scenarios") / f"{name}.yaml").read_text()
    return yaml.safe_load(text)


def fluid_optimum(scenario: Scenario) -> tuple[float, str]:
    """The fluid model's best mean JCT at the best batch over its `default` rule's with
    the declared batch (`bench/jct_fluid.py`), and the rule reaching it."""
    base, _ = jct_fluid.run(scenario, jct_fluid.RULES["fair-fulfillment"], False)
    best = min((jct_fluid.run(scenario, rule, True)[0], name)
               for name, rule in jct_fluid.RULES.items())
    return best[0] / base, best[1]


def fluid_table(rows: list[tuple[str, list[Metrics], list[Metrics], float, str]]) -> str:
    """Per scenario: goodput against default (the simulator, mean of per-seed ratios) and
    against the fluid optimum (the fluid model's best rule over its default rule)."""
    lines = [
        "| scenario | seeds | goodput / default JCT | fluid optimum / default | gap (points) "
        "| makespan / default | resizes / default | unfinished (goodput, default) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, ours, base, optimum, rule in rows:
        def mean(key: str, ours: list[Metrics] = ours, base: list[Metrics] = base) -> float:
            return statistics.fmean(getattr(g, key) / getattr(d, key)
                                    for g, d in zip(ours, base, strict=True))
        jct = mean("jct_mean_s")
        lines.append(
            f"| {name} | {len(ours)} | {jct:.3f} | {optimum:.3f} ({rule}) "
            f"| {100 * (jct - optimum):+.1f} | {mean('makespan_s'):.3f} "
            f"| {mean('resizes_per_job_hour'):.3f} "
            f"| {sum(len(g.unfinished_names) + g.jobs_never_started for g in ours)}, "
            f"{sum(len(d.unfinished_names) + d.jobs_never_started for d in base)} |"
        )
    return "\n".join(lines)


def noisy_varied_scenario(seed: int) -> Scenario:
    """`varied_data_noisy` parsed."""
    data = varied_data_noisy(seed)
    return parse_scenario(data, data["name"])


def varied_data_noisy(seed: int) -> dict:
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
    return data


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
    parser.add_argument("--pauses", default="none,live,restart",
                        help="resize pause modes to run goodput and default in")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.pauses.split(",") if m.strip()]
    unknown = [m for m in modes if m not in PAUSES]
    if unknown or not modes:
        parser.error(f"--pauses: unknown mode(s) {unknown}; choose from {', '.join(PAUSES)}")
    started = time.perf_counter()
    data = shipped_data("mixed-scaling")
    scenario = load_scenario("mixed-scaling")
    adapted = mean_jct_lower_bound(scenario)
    fixed = mean_jct_lower_bound(scenario, adapt_batch=False)
    assert adapted is not None and fixed is not None
    print(f"JCT bound (each job alone at its best goodput): batch adapted {adapted:.0f} s, "
          f"per-trainer batch kept {fixed:.0f} s", flush=True)
    optimum, rule = fluid_optimum(scenario) if args.seeds else (math.nan, "")
    print(f"fluid optimum / default rule: {optimum:.3f} ({rule})", flush=True)
    rows = []
    runs: dict[str, list[Metrics]] = {name: [] for name in VARIANTS}
    for mode in modes if args.seeds else ():
        paused = with_pauses(data, mode)
        pair: dict[str, list[Metrics]] = {name: [] for name in MAIN}
        for seed in range(args.seeds):
            for name in VARIANTS:
                if name not in MAIN and (seed >= args.parts or mode != modes[0]):
                    continue
                policy = VARIANTS[name][0]
                metrics = run_policy(paused, policy, seed, planner=_planner(name)).metrics
                (pair[name] if name in MAIN else runs[name]).append(metrics)
                print(f"{mode} pauses, seed {seed} {name}: JCT {metrics.jct_mean_s:.0f} s, "
                      f"makespan {metrics.makespan_s:.0f} s, resizes/job-h "
                      f"{metrics.resizes_per_job_hour:.1f}", flush=True)
        rows.append((paused.name, pair["goodput"], pair["default"], optimum, rule))
        if mode == modes[0]:
            runs.update(pair)
    if runs["default"]:
        print()
        print(table(runs))
        default_jct = statistics.fmean(m.jct_mean_s for m in runs["default"])
        print(f"\nbound / default mean JCT: batch adapted {adapted / default_jct:.2f}, "
              f"per-trainer batch kept {fixed / default_jct:.2f}")
    for seed in range(VARIED_SEEDS, VARIED_SEEDS + args.varied):
        generated = noisy_varied_scenario(seed)
        paused = with_pauses(varied_data_noisy(seed), modes[0])
        optimum, rule = fluid_optimum(generated)
        pair = {policy: [run_policy(paused, policy, 0).metrics] for policy in MAIN}
        rows.append((paused.name, pair["goodput"], pair["default"], optimum, rule))
        print(f"{paused.name}: " + ", ".join(
            f"{policy} JCT {m[0].jct_mean_s or 0:.0f} s, "
            f"resizes/job-h {m[0].resizes_per_job_hour or 0:.1f}"
            for policy, m in pair.items()) + f"; fluid optimum {optimum:.3f}", flush=True)
    print()
    print(fluid_table(rows))
    if args.out is not None and runs["default"]:
        print(f"wrote {plot(runs, (adapted, fixed), args.out)}")
    print(f"bench wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
