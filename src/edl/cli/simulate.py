"""`edl simulate`: run a scenario on virtual time with one or several policies."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

POLICIES = ("default", "goodput", "reference", "static")


def _policies(values: tuple[str, ...]) -> list[str]:
    """Accept ``--policy a --policy b`` and ``--policy a,b``; keep order, drop repeats."""
    chosen: list[str] = []
    for value in values or ("default",):
        for name in (part.strip() for part in value.split(",")):
            if name not in POLICIES:
                raise click.BadParameter(
                    f"unknown policy {name!r} (choose from {', '.join(POLICIES)})",
                    param_hint="--policy",
                )
            if name not in chosen:
                chosen.append(name)
    return chosen


def _fail(message: str) -> None:
    click.echo(f"edl simulate: {message}", err=True)
    sys.exit(1)


@click.command("simulate")
@click.argument("scenario")
@click.option(
    "--policy", "policy_values", multiple=True, metavar="default|goodput|reference|static",
    help="Scaling policy; repeat or comma-separate to compare (static = autoscaling off).",
)
@click.option("--seed", type=int, default=None, help="Random seed (default: the scenario's).")
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), default=None,
    help="Write metrics.json, timeline.csv, PNG plots and table.md here.",
)
@click.option(
    "--placement", type=click.Choice(["spread", "binpack"]), default=None,
    help="Override the scenario's scheduler placement.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
@click.option(
    "--bound", "with_bound", is_flag=True,
    help="Also compute the steady window's packing bound (steady_utilization_bound_pct: "
    "the most CPU a policy keeping requests within max-load can use; static, which "
    "ignores max-load, may exceed it; it respects taints, selectors, required affinity "
    "and namespace quotas), the same per node pool (steady_utilization_bound_by_pool_pct) "
    "Jain's index over running trainers / constrained max-min fair share (jain_fair_share) "
    "and, for jobs with work, the mean JCT no policy can beat (jct_mean_bound_s).",
)
def simulate_command(
    scenario: str, policy_values: tuple[str, ...], seed: int | None, out_dir: Path | None,
    placement: str | None, as_json: bool, with_bound: bool,
) -> None:
    """Run SCENARIO (a file, or a shipped name such as case1) on virtual time."""
    from edl.sim.report import (
        markdown_table,
        metrics_json,
        write_metrics,
        write_table,
        write_timelines,
    )
    from edl.sim.runner import simulate
    from edl.sim.scenario import ScenarioError, expand_jobs, load_scenario

    # bad option values are usage errors (exit 2, like every command's); a bad scenario is 1
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise click.BadParameter(f"{out_dir}: exists and is not a directory", param_hint="--out")
    policies = _policies(policy_values)
    try:
        loaded = load_scenario(scenario)
    except ScenarioError as error:
        _fail(str(error))
    if placement is not None:
        loaded = loaded.model_copy(update={"placement": placement})
    try:
        runs = simulate(loaded, policies, seed=seed, progress=sys.stderr.isatty())
    except Exception as error:  # one line, no traceback: the CLI contract
        _fail(f"{loaded.name}: run failed: {type(error).__name__}: {error}")
    results = [run.metrics for run in runs]
    if with_bound:
        from dataclasses import replace

        from edl.sim.bound import steady_utilization_bound, steady_utilization_bound_by_pool
        from edl.sim.fair_share import fair_share_stretches, jain_over_fair_shares
        from edl.sim.jct_bound import mean_jct_lower_bound

        limit = steady_utilization_bound(loaded)
        by_pool = steady_utilization_bound_by_pool(loaded)
        fastest = mean_jct_lower_bound(loaded)
        stretches = fair_share_stretches(loaded)
        window = loaded.measure.steady_state
        results = [
            replace(m, steady_utilization_bound_pct=limit, jct_mean_bound_s=fastest,
                    steady_utilization_bound_by_pool_pct=by_pool,
                    jain_fair_share=None if stretches is None else jain_over_fair_shares(
                        run.timeline, stretches, window.start, window.end))
            for m, run in zip(results, runs, strict=True)
        ]
    if out_dir is not None:
        from edl.sim.plots import write_plots

        try:
            write_metrics(results, out_dir)
            write_table(results, out_dir)
            write_timelines(
                {run.policy: run.timeline for run in runs}, out_dir,
                {plan.name: plan.namespace for plan in expand_jobs(loaded)},
                {w.name: w.namespace for w in loaded.workloads},
            )
            window = loaded.measure.steady_state
            written = write_plots({run.policy: run.timeline for run in runs}, out_dir,
                                  loaded.name, (window.start, window.end))
        except OSError as error:
            _fail(f"cannot write {out_dir}: {error}")
        # to stderr: stdout stays the table or the JSON a script reads
        metrics = ("metrics.json" if len(runs) == 1
                   else ", ".join(f"{run.policy}/metrics.json" for run in runs))
        click.echo(f"edl simulate: wrote {metrics}, table.md and "
                   f"{', '.join(p.name for p in written)} to {out_dir}", err=True)
    if as_json:
        if len(results) == 1:
            click.echo(metrics_json(results[0]), nl=False)
        else:
            payload = [json.loads(metrics_json(m)) for m in results]
            click.echo(json.dumps(payload, sort_keys=True, indent=2))
    else:
        click.echo(markdown_table(results), nl=False)
