"""PNG plots of one or several runs of the same scenario (matplotlib, Agg backend).

When several policies ran, the single-line plots overlay them (autoscaling ON vs
OFF), each policy with its own line style so overlapping lines stay apart, and the
trainers-per-job plot gets one panel per policy with a legend naming the jobs.
Counts (trainers, jobs, replicas) get integer ticks.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from edl.sim.timeline import Timeline

PLOT_FILES = ("utilization.png", "trainers.png", "pending_jobs.png", "services.png")
_SIZE = (7.0, 3.4)
_DPI = 80
_STYLES = ("-", "--", ":", "-.")  # one per policy: overlapping lines stay distinguishable
_MAX_LEGEND_JOBS = 12


def _style(index: int) -> str:
    return _STYLES[index % len(_STYLES)]


def _integer_ticks(axes: plt.Axes) -> None:
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))


def _save(figure: plt.Figure, path: Path) -> Path:
    figure.tight_layout()
    # No metadata: the same run gives the same bytes.
    figure.savefig(path, dpi=_DPI, metadata={"Software": None})
    plt.close(figure)
    return path


def plot_utilization(runs: dict[str, Timeline], path: Path, title: str) -> Path:
    figure, axes = plt.subplots(figsize=_SIZE)
    for index, (policy, timeline) in enumerate(runs.items()):
        axes.plot(timeline.times, timeline.utilization_pct(), label=policy, linewidth=1.4,
                  linestyle=_style(index))
    axes.set(xlabel="time (s)", ylabel="CPU requests running (%)", ylim=(0, 100))
    axes.set_title(f"{title}: CPU utilisation")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize="small")
    return _save(figure, path)


def plot_trainers(runs: dict[str, Timeline], path: Path, title: str) -> Path:
    figure, panels = plt.subplots(
        len(runs), 1, figsize=(_SIZE[0], 2.4 * len(runs) + 0.6), sharex=True, squeeze=False
    )
    for (policy, timeline), axes in zip(runs.items(), panels[:, 0], strict=True):
        for name, series in timeline.jobs.items():
            axes.plot(timeline.times, series.trainers_running, linewidth=0.9, label=name)
        axes.set(ylabel="trainers")
        axes.set_title(f"{title}: running trainers per job ({policy})", fontsize="medium")
        axes.grid(alpha=0.3)
        _integer_ticks(axes)
        if 0 < len(timeline.jobs) <= _MAX_LEGEND_JOBS:
            axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="x-small",
                        title="job", title_fontsize="x-small")
        elif timeline.jobs:
            axes.text(1.01, 0.5, f"{len(timeline.jobs)} jobs,\none line each",
                      transform=axes.transAxes, fontsize="x-small", va="center")
    panels[-1, 0].set(xlabel="time (s)")
    return _save(figure, path)


def plot_pending_jobs(runs: dict[str, Timeline], path: Path, title: str) -> Path:
    figure, axes = plt.subplots(figsize=_SIZE)
    for index, (policy, timeline) in enumerate(runs.items()):
        axes.step(timeline.times, timeline.pending_jobs(), where="post", label=policy,
                  linestyle=_style(index), linewidth=1.4)
    axes.set(xlabel="time (s)", ylabel="jobs without a running trainer")
    _integer_ticks(axes)
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


def write_plots(runs: dict[str, Timeline], directory: Path, title: str) -> list[Path]:
    """Write the four PNGs into ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    return [
        plot_utilization(runs, directory / PLOT_FILES[0], title),
        plot_trainers(runs, directory / PLOT_FILES[1], title),
        plot_pending_jobs(runs, directory / PLOT_FILES[2], title),
        plot_services(runs, directory / PLOT_FILES[3], title),
    ]
