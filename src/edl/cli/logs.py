"""`edl logs [RUN] POD [-f]`: print (and follow) a pod's log of a local run.

RUN is a job name (its newest run), a run directory's name or path; without it,
the newest run. POD is a pod name or a unique part of one (`master`, `pserver-00001`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import NoReturn

import click

from edl.local.status import (
    ACTIVE_STATES,
    effective_state,
    find_runs,
    others_active,
    read_snapshot,
)


@click.command("logs")
@click.argument("names", nargs=-1, required=True, metavar="[RUN] POD")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("runs"), show_default=True,
              help="Where `edl run` keeps its run directories.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the run ends.")
def logs(names: tuple[str, ...], runs_dir: Path, follow: bool) -> None:
    """Print POD's log from a local run (the newest, or RUN's)."""
    if len(names) > 2:
        raise click.UsageError("expected [RUN] POD")
    run, pod = (names[0], names[1]) if len(names) == 2 else (None, names[0])
    runs = find_runs(runs_dir, run)
    if not runs:
        what = f"run {run!r}" if run else "any run"
        _fail(f"no {what} under {runs_dir}/")
    run_dir = runs[0]
    for other in others_active(runs):
        click.echo(f"edl logs: another run of this name is active too: {other} (showing the "
                   f"newest, {run_dir.name}; name a run directory to choose)", err=True)
    path = _pod_log(run_dir, pod)
    with path.open("rb") as handle:
        while True:
            chunk = handle.read(65536)
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
                continue
            if not follow or not _active(run_dir):
                return
            time.sleep(0.5)


def _pod_log(run_dir: Path, pod: str) -> Path:
    logs = sorted(p for p in run_dir.glob("*.log") if p.name != "edl-run.log")
    exact = [p for p in logs if p.stem == pod or p.name == pod]
    matches = exact or [p for p in logs if pod in p.stem]
    if len(matches) == 1:
        return matches[0]
    pods = ", ".join(p.stem for p in logs) or "none"
    if not matches:
        _fail(f"no pod {pod!r} in {run_dir} (pods: {pods})")
    _fail(f"{pod!r} matches {len(matches)} pods in {run_dir}: "
          f"{', '.join(p.stem for p in matches)}")


def _active(run_dir: Path) -> bool:
    try:
        return effective_state(read_snapshot(run_dir)) in ACTIVE_STATES
    except ValueError:
        return True  # the file is being replaced right now


def _fail(message: str) -> NoReturn:
    click.echo(f"edl logs: {message}", err=True)
    sys.exit(1)
