"""The plots: sixteen jobs stay apart with a legend, the steady window is shaded,
and a scenario without other workloads gets no (empty) services plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib.patches import Polygon, Rectangle

from edl.sim import plots
from edl.sim.timeline import JobSeries, Timeline, WorkloadSeries


def timeline(jobs: int, workloads: int = 0) -> Timeline:
    times = [0.0, 10.0, 20.0]
    t = Timeline(times=times, cpu_running_milli=[0, 500, 800],
                 cpu_allocatable_milli=[1000] * 3)
    for i in range(jobs):
        t.jobs[f"job-{i}"] = JobSeries([True] * 3, [True] * 3, [1, 2, 1], [1, 2, 1])
    for i in range(workloads):
        t.workloads[f"web-{i}"] = WorkloadSeries([2, 2, 2], [1, 2, 2])
    return t


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures the plots draw (their files are written as usual)."""
    saved: list[Any] = []
    original = plots._save

    def keep(figure: Any, path: Path) -> Path:
        saved.append(figure)
        return original(figure, path)

    monkeypatch.setattr(plots, "_save", keep)
    return saved


def test_sixteen_jobs_each_get_their_own_line_style_and_a_legend_entry(
    tmp_path: Path, figures: list[Any]
) -> None:
    plots.plot_trainers({"default": timeline(16)}, tmp_path / "t.png", "case", (5.0, 15.0))
    (axes,) = figures[0].axes
    lines = axes.get_lines()
    styles = {(tuple(line.get_color()), line.get_linestyle()) for line in lines}
    assert len(lines) == 16 and len(styles) == 16, "two jobs drawn alike"
    legend = axes.get_legend()
    assert legend is not None
    assert [text.get_text() for text in legend.get_texts()][-16:] == [
        f"job-{i}" for i in range(16)]


def test_the_steady_window_is_shaded(tmp_path: Path, figures: list[Any]) -> None:
    plots.plot_utilization({"default": timeline(1)}, tmp_path / "u.png", "case", (5.0, 15.0))
    (axes,) = figures[0].axes
    spans = [p for p in axes.patches if isinstance(p, Polygon | Rectangle)]
    assert spans, "no shaded window"
    xs = [x for x, _ in spans[0].get_xy()] if isinstance(spans[0], Polygon) else [
        spans[0].get_x(), spans[0].get_x() + spans[0].get_width()]
    assert (min(xs), max(xs)) == (5.0, 15.0)
    assert "steady window" in [t.get_text() for t in axes.get_legend().get_texts()]


def test_no_services_plot_without_other_workloads(tmp_path: Path) -> None:
    (tmp_path / "services.png").write_bytes(b"stale")  # a previous run's must not stay
    written = plots.write_plots({"default": timeline(2)}, tmp_path, "case", (5.0, 15.0))
    assert [p.name for p in written] == ["utilization.png", "trainers.png", "pending_jobs.png"]
    assert not (tmp_path / "services.png").exists()
    written = plots.write_plots({"default": timeline(2, workloads=1)}, tmp_path, "case")
    assert [p.name for p in written][-1] == "services.png"
