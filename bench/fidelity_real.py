"""One scenario on the real control plane (in real time) and in `edl simulate`, compared.

Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok shaped
and timed as the scenario says (tests/e2e/fidelity.py), runs `edl controller` against
them while playing the scenario's schedule, records the cluster's watch events and
replays them on the `sample_interval_s` grid, runs the same scenario in `edl simulate`,
and prints the comparison table of docs/fidelity.md ("Simulated vs the real control
plane").

Run: .venv/bin/python bench/fidelity_real.py [SCENARIO] [--out DIR] [--seed N]
[--seeds N] [--time-scale F] [--controller-debug]  (SCENARIO defaults to the shipped
`fidelity`; DIR gets sim/ and real/ timeline.csv, real/pods.csv, real/controller.log,
comparison.md and trainers.png; `--seeds N` also simulates seeds seed+1.. for "one of
the seeds'"; `--time-scale 0.5` plays every duration twice as fast, 1 = the scenario's
own). Needs the binaries of `make k8s`. The real side runs in real time: the scenario's
duration times the scale, plus about 30 s of set-up.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from e2e.control_plane import ControlPlane, k8s_binaries, keep_or_remove
from e2e.fidelity import RealRun, plane_config
from e2e.fidelity_compare import Comparison, compare, event_times
from e2e.fidelity_replay import pods_csv
from edl.sim.report import timeline_csv
from edl.sim.runner import run_policy
from edl.sim.scenario import Scenario, expand_jobs, load_scenario
from edl.sim.timeline import Timeline
from edl.sim.timescale import scale_time


def run_real(scenario: Scenario, work_dir: Path, keep: Path | None = None,
             debug: bool = False) -> RealRun:
    """The scenario run on a fresh real control plane (`run.timeline` holds its samples);
    the controller's log is copied into `keep`."""
    plane = ControlPlane(bin_dir=k8s_binaries(), work_dir=work_dir,
                         config=plane_config(scenario))
    failed = True
    try:
        plane.start()
        run = RealRun(plane, scenario, work_dir, controller_args=("-v",) if debug else ())
        run.run()
        plane.check_running()
        failed = False
        return run
    finally:
        plane.stop()
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(work_dir / "controller.log", keep / "controller.log")
        note = keep_or_remove(plane, failed)
        if note:
            print(note, file=sys.stderr)


def plot(scenario: Scenario, sim: Timeline, real: Timeline, path: Path) -> Path:
    """Trainers per job (top) and CPU utilisation (bottom), simulated solid, real dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True,
                                         gridspec_kw={"height_ratios": [3, 2]})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, job in enumerate(sorted(sim.jobs)):
        colour = colours[index % len(colours)]
        top.plot(sim.times, sim.jobs[job].trainers_running, color=colour, linewidth=1.2,
                 label=f"{job} (simulated)")
        top.plot(real.times, real.jobs[job].trainers_running, color=colour, linewidth=1.2,
                 linestyle="--", label=f"{job} (real)")
    bottom.plot(sim.times, sim.utilization_pct(), color="black", linewidth=1.2,
                label="simulated")
    bottom.plot(real.times, real.utilization_pct(), color="tab:red", linewidth=1.2,
                linestyle="--", label="real")
    for axes in (top, bottom):
        for when in event_times(scenario):
            axes.axvline(when, color="grey", linewidth=0.6, linestyle=":")
        axes.grid(alpha=0.3)
        axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
    from matplotlib.ticker import MaxNLocator

    top.yaxis.set_major_locator(MaxNLocator(integer=True))
    top.set(ylabel="running trainers",
            title=f"{scenario.name}: simulated vs real control plane (dotted: events)")
    bottom.set(xlabel="time (s)", ylabel="CPU requests running (%)")
    figure.tight_layout()
    figure.savefig(path, dpi=80, metadata={"Software": None})
    plt.close(figure)
    return path


def write(out: Path, scenario: Scenario, sim: Timeline, real: Timeline,
          result: Comparison) -> None:
    namespaces = {p.name: p.namespace for p in expand_jobs(scenario)}
    workloads = {w.name: w.namespace for w in scenario.workloads}
    for side, timeline in (("sim", sim), ("real", real)):
        (out / side).mkdir(parents=True, exist_ok=True)
        (out / side / "timeline.csv").write_text(timeline_csv(timeline, namespaces, workloads))
    (out / "comparison.md").write_text(result.table() + "\n")
    plot(scenario, sim, real, out / "trainers.png")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="fidelity")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=1,
                        help="simulate this many seeds (the real run may match any)")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="multiply every duration of the scenario (0.5: twice as fast)")
    parser.add_argument("--controller-debug", action="store_true",
                        help="run edl controller with -v (each tick's inputs in its log)")
    args = parser.parse_args(argv)
    scenario = scale_time(load_scenario(args.scenario), args.time_scale)
    first = scenario.seed if args.seed is None else args.seed
    sims = [run_policy(scenario, "default", first + i).timeline for i in range(args.seeds)]
    sim = sims[0]
    work = Path(tempfile.mkdtemp(prefix="edl-fidelity-"))
    run = run_real(scenario, work, args.out / "real" if args.out else None,
                   args.controller_debug)
    real = run.timeline
    result = compare(scenario, sim, real, others=sims[1:])
    print(result.table())
    latencies = list(run.start_latency_s.values())
    print(f"latest action {run.late_s:.2f} s late; watch lag at most {run.watch_lag_s:.2f} s; "
          f"bind -> Running over "
          f"{len(latencies)} pods: mean {statistics.fmean(latencies):.2f} s, "
          f"{min(latencies):.0f}-{max(latencies):.0f} s")
    if args.out is not None:
        write(args.out, scenario, sim, real, result)
        (args.out / "real" / "pods.csv").write_text(pods_csv(run.samples))
        print(f"wrote {args.out}/sim, {args.out}/real, comparison.md, trainers.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
