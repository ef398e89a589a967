"""PNG plots of one or several runs of the same scenario (matplotlib, Agg backend).

When several policies ran, the single-line plots overlay them (autoscaling ON vs
OFF), each policy with its own line style so overlapping lines stay apart, and the
trainers-per-job plot gets one panel per policy and one legend for all of them,
outside the panels (constrained layout places it, so it is never clipped), each job
its own colour and dash: nine saturated colours (tab10 without its grey, which would
vanish on the shading), then dashes, so 36 jobs stay apart. The scenario's steady
window (where the steady-state metrics are measured) is shaded. The job plots end
where the jobs do, not at the scenario's horizon. 150 dpi. Counts (trainers, jobs,
replicas) get integer ticks. A scenario with no other workloads gets no services plot
(an empty panel says nothing).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.artist import Artist
from matplotlib.ticker import MaxNLocator

from edl.sim.timeline import Timeline

PLOT_FILES = ("utilization.png", "trainers.png", "pending_jobs.png", "services.png")
_SIZE = (7.0, 3.4)
_DPI = 150
_STYLES = ("-", "--", ":", "-.")  # one per policy: overlapping lines stay distinguishable
_MAX_LEGEND_JOBS = 60  # beyond, one legend entry per job is no longer readable
_JOB_COLOURS = (0, 1, 2, 3, 4, 5, 6, 8, 9)  # tab10 without grey (7): all saturated
_JOB_DASHES = ("-", "--", ":", "-.")
_LEGEND_ROWS = 24  # per column of the trainers legend
Window = tuple[float, float]


def _style(index: int) -> str:
    return _STYLES[index % len(_STYLES)]


def _job_style(index: int) -> dict[str, object]:
    """Colour and dash of the index-th job: every pair distinct for 36 jobs."""
    colours = len(_JOB_COLOURS)
    colour = plt.get_cmap("tab10")(_JOB_COLOURS[index % colours])
    dash = _JOB_DASHES[(index // colours) % len(_JOB_DASHES)]
    return {"color": colour, "linestyle": dash}


def jobs_end(runs: dict[str, Timeline]) -> float | None:
    """When the jobs were done, over every run: each job's last sample with a trainer
    running, or its last present sample if it never ran (it waited to the end; a finished
    job that stays present does not stretch the plot). None: no job."""
    end = None
    for timeline in runs.values():
        for series in timeline.jobs.values():
            ran = [t for t, n in zip(timeline.times, series.trainers_running, strict=True) if n]
            waited = [t for t, p in zip(timeline.times, series.present, strict=True) if p]
            last = ran[-1] if ran else (waited[-1] if waited else None)
            if last is not None:
                end = last if end is None else max(end, last)
    return end


def _end_at_jobs(axes: plt.Axes, runs: dict[str, Timeline]) -> None:
    """The x axis ends where the jobs do (a little after), not at the scenario's horizon."""
    end = jobs_end(runs)
    start = min((t.times[0] for t in runs.values() if t.times), default=0.0)
    if end is not None and end > start:
        axes.set_xlim(start, end + 0.03 * (end - start))


def _shade(axes: plt.Axes, steady: Window | None) -> None:
    """Shade the steady window the steady-state metrics are measured in."""
    if steady is not None:
        axes.axvspan(steady[0], steady[1], color="tab:gray", alpha=0.10, linewidth=0,
                     label="steady window")


def _integer_ticks(axes: plt.Axes) -> None:
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))


def _save(figure: plt.Figure, path: Path) -> Path:
    if figure.get_layout_engine() is None:
        figure.tight_layout()
    # No metadata: the same run gives the same bytes.
    figure.savefig(path, dpi=_DPI, metadata={"Software": None})
    plt.close(figure)
    return path


def plot_utilization(
    runs: dict[str, Timeline], path: Path, title: str, steady: Window | None = None
) -> Path:
    figure, axes = plt.subplots(figsize=_SIZE)
    _shade(axes, steady)
    for index, (policy, timeline) in enumerate(runs.items()):
        axes.plot(timeline.times, timeline.utilization_pct(), label=policy, linewidth=1.4,
                  linestyle=_style(index))
    axes.set(xlabel="time (s)", ylabel="CPU requests running (%)", ylim=(0, 100))
    axes.set_title(f"{title}: CPU utilisation")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize="small")
    return _save(figure, path)


def plot_trainers(
    runs: dict[str, Timeline], path: Path, title: str, steady: Window | None = None
) -> Path:
    jobs = max((len(t.jobs) for t in runs.values()), default=0)
    columns = max(1, -(-jobs // _LEGEND_ROWS)) if jobs <= _MAX_LEGEND_JOBS else 1
    figure, panels = plt.subplots(
        len(runs), 1, figsize=(_SIZE[0] + 1.4 * columns, 2.6 * len(runs) + 0.8), sharex=True,
        squeeze=False, layout="constrained",
    )
    handles: dict[str, Artist] = {}  # one legend for every panel: label -> its first line
    for (policy, timeline), axes in zip(runs.items(), panels[:, 0], strict=True):
        _shade(axes, steady)
        for index, (name, series) in enumerate(timeline.jobs.items()):
            (line,) = axes.plot(timeline.times, series.trainers_running, linewidth=1.0,
                                label=name, **_job_style(index))
            handles.setdefault(name, line)
        axes.set(ylabel="trainers")
        axes.set_title(f"{title}: running trainers per job ({policy})", fontsize="medium")
        axes.grid(alpha=0.3)
        _integer_ticks(axes)
        _end_at_jobs(axes, runs)
    if 0 < len(handles) <= _MAX_LEGEND_JOBS:
        if steady is not None:
            shade = next(p for p in panels[0, 0].patches)
            handles = {"steady window": shade, **handles}
        figure.legend(handles=list(handles.values()), labels=list(handles),
                      loc="outside right upper",
                      fontsize="x-small", title="job", title_fontsize="x-small", ncols=columns)
    elif handles:
        figure.text(0.99, 0.5, f"{len(handles)} jobs,\none line each", fontsize="x-small",
                    va="center", ha="right")
    panels[-1, 0].set(xlabel="time (s)")
    return _save(figure, path)


def plot_pending_jobs(runs: dict[str, Timeline], path: Path, title: str) -> Path:
    figure, axes = plt.subplots(figsize=_SIZE)
    for index, (policy, timeline) in enumerate(runs.items()):
        axes.step(timeline.times, timeline.pending_jobs(), where="post", label=policy,
                  linestyle=_style(index), linewidth=1.4)
    axes.set(xlabel="time (s)", ylabel="jobs without a running trainer")
    _integer_ticks(axes)
    _end_at_jobs(axes, runs)
    axes.set_title(f"{title}: pending jobs")
    axes.grid(alpha=0.3)
    axes.legend(loc="upper right", fontsize="small")
    return _save(figure, path)


def plot_services(runs: dict[str, Timeline], path: Path, title: str) -> Path:
    figure, axes = plt.subplots(figsize=_SIZE)
    drawn_target: set[str] = set()
    for index, (policy, timeline) in enumerate(runs.items()):
        for name, series in timeline.workloads.items():
            if name not in drawn_target:
                axes.step(
                    timeline.times, series.desired, where="post", color="black",
                    linestyle="--", linewidth=1, label=f"{name} desired",
                )
                drawn_target.add(name)
            axes.plot(timeline.times, series.running, label=f"{name} running ({policy})",
                      linestyle=_style(index), linewidth=1.4)
    if not drawn_target:
        axes.text(0.5, 0.5, "no other workloads in this scenario", ha="center",
                  transform=axes.transAxes)
    axes.set(xlabel="time (s)", ylabel="replicas")
    _integer_ticks(axes)
    axes.set_title(f"{title}: service replicas")
    axes.grid(alpha=0.3)
    if drawn_target:
        axes.legend(loc="lower left", fontsize="small")
    return _save(figure, path)


def write_plots(
    runs: dict[str, Timeline], directory: Path, title: str, steady: Window | None = None
) -> list[Path]:
    """Write the PNGs into ``directory`` (services.png only if there are other
    workloads); ``steady``: the scenario's steady window, shaded. Returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = [
        plot_utilization(runs, directory / PLOT_FILES[0], title, steady),
        plot_trainers(runs, directory / PLOT_FILES[1], title, steady),
        plot_pending_jobs(runs, directory / PLOT_FILES[2], title),
    ]
    if any(timeline.workloads for timeline in runs.values()):
        written.append(plot_services(runs, directory / PLOT_FILES[3], title))
    else:
        (directory / PLOT_FILES[3]).unlink(missing_ok=True)  # not a previous run's
    return written
