"""The plots: sixteen jobs stay apart with a legend, the steady window is shaded,
and a scenario without other workloads gets no (empty) services plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
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
    (legend,) = figures[0].legends  # one legend, outside the panels
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


def _scenario_timeline(name: str) -> tuple[Timeline, float]:
    """A timeline with the scenario's jobs, each running 1-8 trainers from its submission
    to a staggered end well before the horizon (the simulation itself costs ~13 CPU-s)."""
    from edl.sim.scenario import expand_jobs, load_scenario

    scenario = load_scenario(name)
    horizon = float(scenario.duration_s)
    times = [horizon * i / 200 for i in range(201)]
    t = Timeline(times=times, cpu_running_milli=[0] * 201, cpu_allocatable_milli=[1000] * 201)
    plans = expand_jobs(scenario)
    ends = []
    for i, plan in enumerate(plans):
        end = min(horizon * 0.6, plan.submit_at + horizon * (0.1 + 0.4 * i / len(plans)))
        ends.append(end)
        running = [1 + (i + k) % 8 if plan.submit_at <= x <= end else 0
                   for k, x in enumerate(times)]
        present = [x >= plan.submit_at for x in times]  # finished jobs stay present
        t.jobs[plan.name] = JobSeries(present, present, running, running)
    return t, max(ends)


@pytest.mark.parametrize("name", ["case1", "mixed-scaling"])
def test_the_trainers_plot_reads_at_the_scenarios_job_count(
    tmp_path: Path, figures: list[Any], name: str,
) -> None:
    """Issue 33: per-panel legends overlapped and were clipped at 560-664 px and 80 dpi,
    light colours vanished on the shading, the x axis ran to the horizon."""
    timeline_, end = _scenario_timeline(name)
    runs = {"default": timeline_, "static": timeline_}
    path = plots.plot_trainers(runs, tmp_path / "trainers.png", name, (600.0, 2400.0))
    figure = figures[0]
    canvas = FigureCanvasAgg(figure)  # closed after saving: draw it again as it was saved
    canvas.draw()
    renderer = canvas.get_renderer()
    (legend,) = figure.legends
    box, frame = legend.get_window_extent(renderer), figure.bbox
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
    for axes in figure.axes:  # the legend is beside the panels, not over them
        assert axes.get_legend() is None
        assert not box.overlaps(axes.get_window_extent(renderer))
        assert axes.get_xlim()[1] <= end * 1.05
    with path.open("rb") as png:
        width = int.from_bytes(png.read(24)[16:20], "big")
    assert width >= 7 * 150  # 150 dpi
    colours = {tuple(line.get_color()) for line in figure.axes[0].get_lines()}
    assert all(max(c[:3]) - min(c[:3]) > 0.15 for c in colours), "a grey line on the shading"
    styles = {(tuple(line.get_color()), line.get_linestyle())
              for line in figure.axes[0].get_lines()}
    assert len(styles) == len(timeline_.jobs)
