"""`edl status [JOB]`: show a local run from another terminal.

Reads the status file that `edl run` rewrites every second in its run
directory (``runs/<job>-<timestamp>/status.json``); without JOB, the newest run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from edl.local.status import RunSnapshot, effective_state, find_runs, read_snapshot

ACTIVE = ("Starting", "Running", "Stopping")


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
def status(job: str | None, runs_dir: Path, watch: bool, plain: bool) -> None:
    """Show the state of a local run (pass, tasks, trainers, loss, samples/s, pods)."""
    from rich.console import Console
    from rich.live import Live

    from edl.local.display import render, summary_line

    runs = find_runs(runs_dir, job)
    if not runs:
        what = f"job {job!r}" if job else "any job"
        click.echo(f"edl status: no run of {what} under {runs_dir}/", err=True)
        sys.exit(1)
    run_dir = runs[0]
    try:
        snapshot = read_snapshot(run_dir)
    except ValueError as error:
        click.echo(f"edl status: {error}", err=True)
        sys.exit(1)
    console = Console()
    if not watch:
        if plain:
            click.echo(summary_line(snapshot, effective_state(snapshot)))
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
