"""`edl status [RUN]`: show a local run from another terminal; `--all` lists recent runs.

Reads the status file that `edl run` rewrites every second in its run
directory (``runs/<job>-<timestamp>/status.json``); RUN is a job name (its newest
run), a run directory's name or path; without it, the newest run.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from edl.local.status import (
    RunSnapshot,
    effective_state,
    find_runs,
    others_active,
    read_snapshot,
)

ACTIVE = ("Starting", "Running", "Stopping")
LIST_LIMIT = 20


def _list(runs: list[Path], output: str) -> None:
    """One row per run: name, state, pass, trainers, accuracy, started, duration."""
    from edl.local.display import fmt_duration

    rows = []
    for run_dir in runs:
        try:
            s = read_snapshot(run_dir)
        except ValueError:
            continue
        rows.append({
            "run": run_dir.name, "state": effective_state(s),
            "pass": f"{(s.pass_index or 0) + 1}/{s.passes}" if s.passes else "",
            "trainers": f"{s.trainers_running}/{s.trainers_desired}",
            "accuracy": s.accuracy,
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.started_at)),
            "duration": fmt_duration(s.elapsed_s),
        })  # fmt: skip
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no runs")
        return
    headers = list(rows[0])
    table = [[("" if r[h] is None else f"{r[h]:.3f}" if h == "accuracy" else str(r[h]))
              for h in headers] for r in rows]
    widths = [max([len(h), *(len(row[i]) for row in table)]) for i, h in enumerate(headers)]
    for row in [[h.upper() for h in headers], *table]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@click.command("status")
@click.argument("job", required=False)
@click.option(
    "--runs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Where `edl run` keeps its run directories.",
)
@click.option("--watch", "-w", is_flag=True, help="Keep refreshing until the run ends.")
@click.option("--plain", is_flag=True, help="One summary line instead of the panel.")
@click.option("--all", "-a", "list_all", is_flag=True,
              help="List the recent runs (of JOB, if given), newest first.")
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: the status file, with the state as shown.")
def status(
    job: str | None, runs_dir: Path, watch: bool, plain: bool, list_all: bool, output: str
) -> None:
    """Show the state of a local run (pass, tasks, trainers, loss, samples/s, pods)."""
    from rich.console import Console
    from rich.live import Live

    from edl.local.display import render

    runs = find_runs(runs_dir, job)
    if list_all:
        _list(runs[:LIST_LIMIT], output)
        return
    if not runs:
        what = f"job {job!r}" if job else "any job"
        click.echo(f"edl status: no run of {what} under {runs_dir}/", err=True)
        sys.exit(1)
    run_dir = runs[0]
    for other in others_active(runs):
        click.echo(f"edl status: another run of this name is active too: {other} (showing the "
                   f"newest, {run_dir.name}; name a run directory to choose)", err=True)
    try:
        snapshot = read_snapshot(run_dir)
    except ValueError as error:
        click.echo(f"edl status: {error}", err=True)
        sys.exit(1)
    console = Console()
    plain = plain or not console.is_terminal  # a pipe or a file gets text, not a panel
    if output == "json":
        click.echo(json.dumps({**snapshot.to_dict(), "state": effective_state(snapshot)},
                              indent=2))
    elif not watch:
        if plain:
            _print_plain(snapshot)
        else:
            console.print(render(snapshot, effective_state(snapshot)))
    elif plain:
        snapshot = _follow_lines(run_dir, snapshot)
    else:
        with Live(render(snapshot, effective_state(snapshot)), console=console) as live:
            while effective_state(snapshot) in ACTIVE:
                time.sleep(1)
                snapshot = _reread(run_dir, snapshot)
                live.update(render(snapshot, effective_state(snapshot)))
    state = effective_state(snapshot)
    sys.exit(1 if state in ("Failed", "Stale") else 0)


def _print_plain(snapshot: RunSnapshot) -> None:
    """The summary line, then the pods and the last events, one plain line each."""
    from edl.local.display import fmt_duration, summary_line

    click.echo(summary_line(snapshot, effective_state(snapshot)))
    for pod in snapshot.pods:
        where = f"pid {pod.pid}" if pod.pid else (
            f"exit {pod.exit_code}" if pod.exit_code is not None else "")
        detail = f" {pod.message}" if pod.message else ""
        click.echo(f"  pod {pod.name} {pod.role} {pod.phase} {where}{detail}".rstrip())
    for at, text in snapshot.events[-6:]:
        click.echo(f"  [{fmt_duration(at)}] {text}")
    if snapshot.run_dir:
        click.echo(f"  logs: {snapshot.run_dir}")


def _reread(run_dir: Path, previous: RunSnapshot) -> RunSnapshot:
    """The newest snapshot; the previous one if the file is being replaced right now."""
    try:
        return read_snapshot(run_dir)
    except ValueError:
        return previous


def _follow_lines(run_dir: Path, snapshot: RunSnapshot) -> RunSnapshot:
    """--watch --plain: a summary line whenever the figures change, until the run ends."""
    from edl.local.display import summary_line

    last = ""
    while True:
        state = effective_state(snapshot)
        line = summary_line(snapshot, state)
        if line.rsplit(", ", 1)[0] != last.rsplit(", ", 1)[0]:
            click.echo(line)
            last = line
        if state not in ACTIVE:
            return snapshot
        time.sleep(1)
        snapshot = _reread(run_dir, snapshot)
