"""`edl run JOB.yaml`: run a TrainingJob on this machine, elastic, to completion.

Exit status (the rule of every edl command, as kubectl's): 0 when the job Succeeded;
1 when it Failed (the reason is the last line printed), for a job file that cannot
be read or is invalid (one line naming every wrong field) or when no etcd binary is
found; 2 for a bad option value (usage); 130 when stopped with Ctrl-C (a second
Ctrl-C kills every pod at once).
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from edl.api.trainingjob import TrainingJob
    from edl.local.run import LocalRun, RunOptions

EXIT_FAILED, EXIT_BAD_JOB, EXIT_USAGE, EXIT_STOPPED = 1, 1, 2, 130


@dataclass(frozen=True)
class Reservation:
    """`--reserve CPU@START[-END]`: hold CPU cores from START to END seconds into the run."""

    cpu: str
    start_s: float
    end_s: float | None


def parse_reservation(text: str) -> Reservation:
    match = re.fullmatch(r"\s*([0-9.]+m?)\s*@\s*([0-9.]+)\s*(?:-\s*([0-9.]+))?\s*", text)
    if not match:
        raise click.BadParameter(f"{text!r}: expected CPU@START[-END], e.g. 1.2@20-60")
    cpu, start, end = match.groups()
    reservation = Reservation(cpu, float(start), float(end) if end else None)
    if reservation.end_s is not None and reservation.end_s <= reservation.start_s:
        raise click.BadParameter(f"{text!r}: END must come after START")
    return reservation


@dataclass(frozen=True)
class NumberRule:
    """What a numeric option accepts: its type and bounds (``low`` excluded if ``open_low``)."""

    kind: type[int] | type[float]
    low: float
    open_low: bool = False
    high: float | None = None

    def problem(self, option: str, text: str) -> str:
        """'' when ``text`` is acceptable, else one phrase naming the option."""
        noun = "an integer" if self.kind is int else "a number"
        try:
            value = self.kind(text)
        except ValueError:
            return f"{option}: must be {noun}, got {text!r}"
        too_low = value <= self.low if self.open_low else value < self.low
        if too_low or (self.high is not None and value > self.high):
            bound = f"> {self.low:g}" if self.open_low else f">= {self.low:g}"
            if self.high is not None:
                bound += f" and <= {self.high:g}"
            return f"{option}: must be {bound}, got {text!r}"
        return ""


NUMBER_RULES = {
    "--max-load": NumberRule(float, 0.05, high=1.0),
    "--timeout": NumberRule(float, 0, open_low=True),
    "--max-error-exits": NumberRule(int, 1),
    "--checkpoint-interval": NumberRule(float, 0, open_low=True),
    "--stall-warning": NumberRule(float, 0, open_low=True),
    "--stall-limit": NumberRule(float, 0, open_low=True),
}


def option_problems(
    cpu: str | None, memory: str | None, policy: str, reserve: list[Reservation | str],
    numbers: dict[str, str | None] | None = None,
) -> list[str]:
    """Every bad option value, named, before anything starts (one phrase each)."""
    from edl.api.quantity import QuantityError, cpu_milli, memory_mega
    from edl.policy import get_policy

    problems = []
    for option, text in (numbers or {}).items():
        problem = NUMBER_RULES[option].problem(option, text) if text is not None else ""
        if problem:
            problems.append(problem)
    for i, item in enumerate(reserve):
        if isinstance(item, str):
            problems.append(f"--reserve[{i}]: {item}")
    checks = [(cpu, "--cpu", cpu_milli), (memory, "--memory", memory_mega)]
    checks += [(r.cpu, f"--reserve[{i}]", cpu_milli) for i, r in enumerate(reserve)
               if isinstance(r, Reservation)]
    for value, option, parse in checks:
        if value is None:
            continue
        try:
            if parse(value, option) <= 0:
                problems.append(f"{option}: must be positive, got {value!r}")
        except QuantityError as error:
            problems.append(str(error))
    try:
        get_policy(policy)
    except ValueError as error:
        problems.append(f"--policy: {error}")
    return problems


@click.command("run")
@click.argument("job_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--cpu", help="Virtual CPU allocatable of this machine (e.g. 4); default: its cores.")
@click.option("--memory", help="Virtual memory allocatable (e.g. 8Gi); default: the machine's.")
@click.option(
    "--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
    show_default=True, help="Where run directories (logs, status.json) are made.",
)
@click.option("--policy", default="default", show_default=True, help="Autoscaler policy.")
@click.option(
    "--max-load", default="0.97", show_default=True,
    help="Fraction of the machine the Autoscaler may fill (0.05-1).",
)
@click.option(
    "--reserve", "reservations", multiple=True, metavar="CPU@START[-END]",
    help="Hold CPU for another tenant from START to END s (shows elasticity). Repeatable.",
)
@click.option("--timeout", help="Fail the run after this many seconds (> 0).")
@click.option("--max-error-exits", default="3", show_default=True,
              help="Fail when this many master or pserver pods exit with an error (crash "
                   "loop); crashing trainers fail their Job by its backoffLimit.")
@click.option("--checkpoint-interval", default="10",
              show_default=True, help="Seconds between pserver checkpoints (a killed pserver "
                                      "restores the last one).")
@click.option("--stall-warning", help="Say which trainers run without progress after this "
              "many seconds (default: 10x the longest gap between progress, at least 120).")
@click.option("--stall-limit", help="Fail the run after this many seconds without progress "
              "(default: never).")
@click.option("--plain", is_flag=True, help="Summary lines instead of the live panel.")
def run(
    job_file: Path,
    cpu: str | None,
    memory: str | None,
    runs_dir: Path,
    policy: str,
    max_load: str,
    reservations: tuple[str, ...],
    timeout: str | None,
    max_error_exits: str,
    checkpoint_interval: str,
    stall_warning: str | None,
    stall_limit: str | None,
    plain: bool,
) -> None:
    """Run JOB_FILE locally: embedded etcd, Controller, Autoscaler, pods as processes."""
    from edl.api.errors import JobValidationError, format_problem
    from edl.api.jobfile import JobLoadError, load_trainingjob
    from edl.coord.embedded import EtcdBinaryNotFound, find_etcd_binary
    from edl.local.run import RunOptions

    reserve: list[Reservation | str] = []
    for text in reservations:
        try:
            reserve.append(parse_reservation(text))
        except click.BadParameter as error:
            reserve.append(error.message)
    numbers = {"--max-load": max_load, "--timeout": timeout,
               "--max-error-exits": max_error_exits, "--checkpoint-interval": checkpoint_interval,
               "--stall-warning": stall_warning, "--stall-limit": stall_limit}
    problems = option_problems(cpu, memory, policy, reserve, numbers)
    if problems:
        click.echo(f"edl run: {'; '.join(problems)}", err=True)
        sys.exit(EXIT_USAGE)
    try:
        job = load_trainingjob(job_file)
        find_etcd_binary()  # before a run directory or a display exists
        options = RunOptions(
            runs_root=runs_dir, cpu=cpu, memory=memory, policy=policy,
            max_load_desired=float(max_load),
            timeout_s=float(timeout) if timeout is not None else None,
            max_error_exits=int(max_error_exits),
            checkpoint_interval_s=float(checkpoint_interval),
            stall_warning_s=float(stall_warning) if stall_warning is not None else None,
            stall_limit_s=float(stall_limit) if stall_limit is not None else None,
            job_dir=job_file.resolve().parent,
        )
        placed = [r for r in reserve if isinstance(r, Reservation)]
        code = asyncio.run(_run(job, options, placed, plain))
    except JobLoadError as error:
        click.echo(f"edl run: {job_file}: {error}", err=True)
        sys.exit(EXIT_BAD_JOB)
    except JobValidationError as error:
        found = "; ".join(format_problem(problem) for problem in error.problems)
        click.echo(f"edl run: {job_file}: {found}", err=True)
        sys.exit(EXIT_BAD_JOB)
    except EtcdBinaryNotFound as error:
        click.echo(f"edl run: {error}", err=True)
        sys.exit(EXIT_FAILED)
    sys.exit(code)


async def _run(
    job: TrainingJob, options: RunOptions, reserve: list[Reservation], plain: bool
) -> int:
    from edl.local.display import LiveDisplay
    from edl.local.run import SUCCEEDED, LocalRun, RunResult

    display = LiveDisplay(plain=True if plain else None)
    local = LocalRun(job, options, on_update=display.update)
    _log_to(local.run_dir / "edl-run.log")
    loop = asyncio.get_running_loop()
    interrupts = 0

    def on_signal(signum: int) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            local.stop(f"stopped by {signal.Signals(signum).name}")
        else:
            local.kill_now()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, on_signal, sig)
    result: RunResult | None = None
    holders: list[asyncio.Task[None]] = []
    with display:
        try:
            await local.start()
            holders = [asyncio.create_task(_hold(local, r, i)) for i, r in enumerate(reserve)]
            result = await local.wait()
        except Exception as error:  # etcd or a component failed to start: one line, no traceback
            result = RunResult("Failed", f"{type(error).__name__}: {error}", local.run_dir,
                               local.snapshot)
        finally:
            for task in holders:
                task.cancel()
            await local.close(result)
    if result.state == SUCCEEDED:
        accuracy = local.snapshot.accuracy
        extra = f", accuracy {accuracy:.4f}" if accuracy is not None else ""
        saved = f", {local.snapshot.checkpoint}" if local.snapshot.checkpoint else ""
        click.echo(f"edl run: {local.name} Succeeded{extra}{saved} — logs in {local.run_dir}")
        return 0
    click.echo(f"edl run: {local.name} {result.state}: {result.message}", err=True)
    if local.snapshot.checkpoint:
        click.echo(f"edl run: {local.snapshot.checkpoint}", err=True)
    click.echo(f"edl run: logs in {local.run_dir}", err=True)
    return EXIT_STOPPED if result.state == "Stopped" else EXIT_FAILED


def _log_to(path: Path) -> None:
    """Controller, Autoscaler and run messages go to the run directory, not over the display."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


async def _hold(local: LocalRun, reservation: Reservation, index: int) -> None:
    """Take the reservation at its start time and give it back at its end."""
    name = f"reserved-{index}"
    await asyncio.sleep(reservation.start_s)
    local.reserve(name, reservation.cpu)
    if reservation.end_s is not None:
        await asyncio.sleep(reservation.end_s - reservation.start_s)
        local.release(name)
