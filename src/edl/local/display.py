"""Rendering a run snapshot with rich: the live view of `edl run` and `edl status`.

`render` is a pure function of a `RunSnapshot`, so the live display and the
one-shot `edl status` look the same and tests can render without a terminal.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from edl.local.snapshot import eta_s, overall
from edl.local.status import RunSnapshot

STATE_STYLES = {
    "Starting": "yellow",
    "Running": "green",
    "Stopping": "yellow",
    "Succeeded": "bold green",
    "Failed": "bold red",
    "Stopped": "red",
    "Stale": "red",
}
# a pod stopped on purpose (drained, released) or deleted before it ran is no alarm
POD_STYLES = {**STATE_STYLES, "Stopped": "dim", "Deleted": "dim"}
MAX_POD_ROWS = 12
MAX_EVENT_ROWS = 6


def fmt_duration(seconds: float) -> str:
    seconds = int(seconds)
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def fmt_optional(value: float | int | None, spec: str = "") -> str:
    return "–" if value is None else format(value, spec)


def summary_line(s: RunSnapshot, state: str | None = None) -> str:
    """One plain line: what a log or a non-terminal shows."""
    shown = state or s.state
    parts = [f"{s.job}: {shown}"]
    if s.passes:
        parts.append(f"pass {(s.pass_index or 0) + 1}/{s.passes}")
    if s.tasks_total:
        parts.append(f"tasks {s.tasks_done or 0}/{s.tasks_total}")
    parts.append(f"trainers {s.trainers_running}/{s.trainers_desired}")
    parts += _collective_parts(s) if s.mode == "collective" else _batch_parts(s)
    if s.loss is not None:
        parts.append(f"loss {s.loss:.4f}")
    if s.samples_per_s is not None:
        parts.append(f"{s.samples_per_s:.0f} samples/s")
    if s.accuracy is not None:
        parts.append(f"accuracy {s.accuracy:.3f}")
    figures = overall(s)
    if figures is not None and shown == "Running":  # after the figures scripts match on
        eta = eta_s(s)
        parts.append(f"{100 * figures[0] // figures[1]}% overall"
                     + (f" (ETA {fmt_duration(eta)})" if eta is not None else ""))
    parts.append(fmt_duration(s.elapsed_s))
    line = ", ".join(parts)
    return f"{line} — {s.message}" if s.message else line


def render(s: RunSnapshot, state: str | None = None) -> RenderableType:
    """The whole view: header, pass progress, trainers and training figures, pods."""
    shown = state or s.state
    title = Text.assemble(
        ("edl run ", "bold"),
        (f"{s.namespace}/{s.job}", "bold cyan"),
        "  ",
        (shown, STATE_STYLES.get(shown, "")),
        f"  {fmt_duration(s.elapsed_s)}",
    )
    figures = Table.grid(padding=(0, 2))
    figures.add_column(style="dim")
    figures.add_column()
    if s.passes:
        figures.add_row("pass", f"{(s.pass_index or 0) + 1} / {s.passes}")
    done, total = s.tasks_done or 0, s.tasks_total or 0
    if s.mode == "collective":
        figures.add_row("collective", ", ".join(_collective_parts(s)) or "–")
        if s.world_history:
            changes = " → ".join(f"{int(w)} at {fmt_duration(t)}" for t, w, *_ in s.world_history)
            figures.add_row("world sizes", changes)
        if overall(s) is not None:
            figures.add_row("all epochs", _overall_bar(s, "epochs"))
    else:
        figures.add_row(
            "tasks",
            Group(
                Text(f"{done} / {total}" if total else "–"),
                ProgressBar(total=max(total, 1), completed=done, width=30),
            )
            if total
            else Text("–"),
        )
        if overall(s) is not None:
            figures.add_row("all passes", _overall_bar(s, "tasks"))
        if batch := _batch_parts(s):  # spec.batch: the pservers' measurement
            figures.add_row("batch", ", ".join(batch))
    figures.add_row(
        "trainers",
        f"{s.trainers_running} running / {s.trainers_desired} desired"
        f"  (min {s.trainers_min}, max {s.trainers_max})",
    )
    figures.add_row("loss", fmt_optional(s.loss, ".4f"))
    if s.mode != "collective":  # the script's throughput is not reported
        figures.add_row("samples/s", fmt_optional(s.samples_per_s, ".0f"))
    if s.measured_trainers is not None:
        figures.add_row("scaling", scaling_line(s))
    if s.accuracy is not None:
        figures.add_row("accuracy", f"{s.accuracy:.3f}")
    if s.tasks_failed or s.redispatched:
        figures.add_row("re-dispatched / failed", f"{s.redispatched or 0} / {s.tasks_failed or 0}")
    parts: list[RenderableType] = [figures]
    if s.pods:
        parts.append(pod_table(s))
    for at, text in s.events[-MAX_EVENT_ROWS:]:
        parts.append(Text(f"{fmt_duration(at)}  {text}", style="yellow"))
    if s.message:
        parts.append(Text(s.message, style=STATE_STYLES.get(shown, "")))
    if s.run_dir:
        parts.append(Text(f"logs: {s.run_dir}", style="dim"))
    return Panel(Group(*parts), title=title, title_align="left", expand=False)


def _overall_bar(s: RunSnapshot, unit: str) -> RenderableType:
    """Done / total of the whole run (tasks of all passes, or epochs) with the ETA."""
    done, total = overall(s) or (0, 0)
    eta = eta_s(s)
    left = f"  ETA {fmt_duration(eta)}" if eta is not None else ""
    return Group(
        Text(f"{done} / {total} {unit}{left}"),
        ProgressBar(total=max(total, 1), completed=done, width=30),
    )


def scaling_line(s: RunSnapshot) -> str:
    """Measured throughput at the contributing count, and the fit's prediction at ±1."""
    n = s.measured_trainers or 0
    line = f"measured {s.measured_samples_per_s or 0:.1f} samples/s with {n} trainers"
    if s.fitted_samples_per_s:
        minus, here, plus = s.fitted_samples_per_s
        line += f"; fit: {n - 1} -> {minus:.1f}, {n} -> {here:.1f}, {n + 1} -> {plus:.1f}"
    return line


def pod_table(s: RunSnapshot) -> Table:
    table = Table(show_edge=False, box=None, pad_edge=False)
    for column in ("pod", "role", "phase", "pid / exit"):
        table.add_column(column, style="dim" if column == "pid / exit" else None)
    live = [p for p in s.pods if p.phase in ("Pending", "Running")]
    ended = [p for p in s.pods if p.phase not in ("Pending", "Running")]
    rows = live + ended[-max(0, MAX_POD_ROWS - len(live)) :] if ended else live
    for p in rows[:MAX_POD_ROWS]:
        where = str(p.pid) if p.pid else ("" if p.exit_code is None else f"exit {p.exit_code}")
        if p.phase == "Pending" and p.message:
            where = p.message  # the scheduler's reason
        elif p.phase == "Deleted":
            where = "never ran"
        table.add_row(p.name, p.role, Text(p.phase, POD_STYLES.get(p.phase, "")), where)
    hidden = len(s.pods) - min(len(rows), MAX_POD_ROWS)
    if hidden > 0:
        table.add_row(f"… {hidden} more", "", "", "")
    return table


class LiveDisplay:
    """The live view of `edl run`: a rich panel on a terminal, summary lines otherwise.

    Off a terminal (CI logs, tests) a line is printed when the figures change,
    at most every ``line_every_s`` seconds, so logs stay readable.
    """

    def __init__(self, plain: bool | None = None, line_every_s: float = 5.0) -> None:
        from rich.console import Console

        self.console = Console()
        self.plain = (not self.console.is_terminal) if plain is None else plain
        self.line_every_s = line_every_s
        self._live: Any = None
        self._last_line = ""
        self._last_line_at = float("-inf")
        self._events_printed = 0

    def __enter__(self) -> LiveDisplay:
        if not self.plain:
            from rich.live import Live

            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def update(self, snapshot: RunSnapshot) -> None:
        if self._live is not None:
            self._live.update(render(snapshot))
            return
        new = snapshot.events_total - self._events_printed
        for at, text in snapshot.events[-new:] if new > 0 else []:
            print(f"{snapshot.job}: [{fmt_duration(at)}] {text}", flush=True)
        self._events_printed = max(self._events_printed, snapshot.events_total)
        line = summary_line(snapshot)
        now = time.monotonic()
        changed = _figures(line) != _figures(self._last_line)
        if changed and (now - self._last_line_at >= self.line_every_s or _final(snapshot)):
            print(line, flush=True)
            self._last_line, self._last_line_at = line, now

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None


def _final(snapshot: RunSnapshot) -> bool:
    return snapshot.state in ("Succeeded", "Failed", "Stopped")


def _figures(line: str) -> str:
    """A summary line without its elapsed time, to tell real changes from the clock ticking."""
    return line.rsplit(", ", 1)[0] if line else ""


def _collective_parts(s: RunSnapshot) -> list[str]:
    """World size, restarts and epoch of a collective job, as short phrases."""
    parts = []
    if s.world_size is not None:
        parts.append(f"world {s.world_size}")
    parts.append(f"restarts {s.restarts}")
    if s.epoch is not None:
        parts.append(f"epoch {s.epoch}" + (f"/{s.epochs}" if s.epochs else ""))
    return parts + _batch_parts(s)


def _batch_parts(s: RunSnapshot) -> list[str]:
    """A batch-adapting job's batch, measured noise scale and efficiency."""
    parts = []
    if s.batch is not None:
        parts.append(f"batch {s.batch:.0f}")
    if s.noise_scale is not None:
        parts.append(f"noise scale {s.noise_scale:.0f}")
    elif s.noise_unresolved:  # the job's gradient noise hides |G|² so far: φ is not bounded
        parts.append("noise scale unresolved (|G|² below the noise)")
    if s.efficiency is not None:
        parts.append(f"efficiency {s.efficiency:.2f}")
    return parts
