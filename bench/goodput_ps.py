"""Goodput with batch adaptation on parameter-server jobs only (issue 32): the simulator
against the fluid model, on `bench/scenarios/ps-batch.yaml`.

Every job of the scenario is a PS job that adapts its batch and takes a chosen batch at
its master's next tasks (``batch_change: task``: no restart). Figures, all from this run:

* the fluid model (`bench/jct_fluid.py`: free resizes, exact curves and φ): `default`'s
  rule (``fair-fulfillment``) with each job's declared per-trainer batch and with the
  best batch — their ratio is what batch adaptation *alone* can give there — and
  goodput's rule (``log-speedup``) with the best batch (the optimum it aims at);
* the simulator: ``goodput`` and ``default`` on the same seeds, and ``goodput`` with
  the jobs taking a new batch only at a restart or epoch boundary (``batch_change:
  epoch``, as a collective job), which shows what the task-boundary hand-out buys.

The acceptance (issue 32): ``goodput`` / ``default`` mean JCT at most the fluid
model's batch-alone ratio. Usage: ``python bench/goodput_ps.py [--seeds 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from edl.sim.runner import run_policy
from edl.sim.scenario import Scenario, load_scenario
from jct_fluid import RULES, run

SCENARIO = Path(__file__).parent / "scenarios" / "ps-batch.yaml"


def at_epochs(scenario: Scenario) -> Scenario:
    """The scenario with every job taking a new batch at restarts and epochs only."""
    jobs = [group.model_copy(update={"work": group.work.model_copy(
        update={"batch_change": "epoch"})}) if group.work is not None else group
        for group in scenario.training.jobs]
    training = scenario.training.model_copy(update={"jobs": jobs})
    return scenario.model_copy(update={"training": training})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    scenario = load_scenario(SCENARIO)
    fixed = run(scenario, RULES["fair-fulfillment"], adapt=False)[0]
    adapted = run(scenario, RULES["fair-fulfillment"], adapt=True)[0]
    optimum = run(scenario, RULES["log-speedup"], adapt=True)[0]
    alone = adapted / fixed
    print(f"fluid model: fair-fulfillment fixed batch {fixed:.0f} s, adapted {adapted:.0f} s "
          f"(batch alone {alone:.3f}x); log-speedup adapted {optimum:.0f} s "
          f"({optimum / fixed:.3f}x)", flush=True)
    variants = {"goodput": (scenario, "goodput"), "default": (scenario, "default"),
                "goodput, batch at epochs": (at_epochs(scenario), "goodput")}
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    for seed in range(args.seeds):
        for name, (which, policy) in variants.items():
            m = run_policy(which, policy, seed).metrics
            runs[name].append((m.jct_mean_s or 0.0, m.makespan_s or 0.0,
                               m.resizes_per_job_hour or 0.0))
            print(f"seed {seed} {name}: JCT {m.jct_mean_s:.0f} s, makespan "
                  f"{m.makespan_s:.0f} s, resizes/job-h {m.resizes_per_job_hour:.1f}",
                  flush=True)
    base = statistics.fmean(jct for jct, _, _ in runs["default"])
    print("\n| variant | mean JCT (s) | / default | / fluid fixed-batch default | "
          "makespan (s) | resizes/job-h |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, values in runs.items():
        jct = statistics.fmean(v[0] for v in values)
        makespan = statistics.fmean(v[1] for v in values)
        resizes = statistics.fmean(v[2] for v in values)
        print(f"| {name} | {jct:.0f} | {jct / base:.3f} | {jct / fixed:.3f} | "
              f"{makespan:.0f} | {resizes:.1f} |")
    ours = statistics.fmean(v[0] for v in runs["goodput"]) / base
    verdict = "meets" if ours <= alone else "misses"
    print(f"\ngoodput / default {ours:.3f} vs fluid batch-alone {alone:.3f}: {verdict} "
          f"the acceptance; fluid optimum {optimum / fixed:.3f}")
    print(f"bench wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
