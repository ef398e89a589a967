"""The simulation against the real control plane: a shipped scenario in real time on
kube-apiserver, kube-controller-manager, kube-scheduler and kwok, and in `edl simulate`.

* `fidelity` (issue 11): 20 nodes, three elastic jobs, a service wave.
* `fidelity-constrained` (issue 21): a tainted, labelled GPU pool that only the `gpu` job
  tolerates and selects; a `web` service at a high PriorityClass rising into a cluster
  full of trainers, so kube-scheduler preempts trainers (the simulator: the in-process
  model's preemption); a `research` namespace with a ResourceQuota that bounds its job.

Acceptance: CPU utilisation over the run within 5 points of the simulation, and the same
allocation after each event has settled. "Settled" is checked, not assumed: the real
allocation must have stopped moving `SETTLE_MARGIN_S` (scaled) before the next event, so
two resting states are compared. "The same allocation" (`fidelity_compare.Stretch`):
for `fidelity`, every job's running trainers at the stretch's last sample equal the
simulator's at seed 0, exactly (`same`; its seeds all agree). For
`fidelity-constrained` the comparison is `determined` over seeds 0-7 (every job whose
count all seeds agree on has exactly that count; jobs whose count varies have the total
all seeds give, each within their range). Today the seeds agree on every stretch (the
quota-bound `research` job keeps its fair share of its quota when the service rises, so
the preempted room comes out of `cpu` alone: test_fidelity_compare.py pins it), so this
is exact equality too.

Time scale (issue 19): `fidelity` runs at the production scale (200 s of real time: the
figures of docs/fidelity.md). `fidelity-constrained` runs at three quarters
(`edl.sim.timescale.scale_time(..., 0.75)`: every submission, replica change, pod
latency, autoscaler tick and sample three quarters as long; 105 s instead of 140 s). What it
proves does not depend on that: the simulator's settled allocations are the same at
scales 1, 0.75 and 0.5 and its utilisation within a point (test_fidelity_compare.py pins
it for both scenarios), and what does not scale on the real side -- API, watch and
controller latencies of 2-14 s per event, more on a loaded machine -- is what the settle
check measures: the run fails if the real cluster had not come to rest `SETTLE_MARGIN_S`
× scale before the next event. (At half scale, under load 22, the first stretch settled
14 s into its 20: too close to the 15 s limit to be reliable.)
`bench/fidelity_real.py --time-scale` runs either scenario at any scale.

Recording: the real side is a log of watch events replayed on the sample grid afterwards
(tests/e2e/watch_record.py), so a loaded machine cannot make it miss its grid; the
scheduled actions must still start within `ACTION_LATE_S` of their time, and the watch's
lag (arrival minus creationTimestamp) must stay under the settle margin: a state recorded
later than that could pass for settled when it was not. The recording survives load; the
real cluster's decisions do not: beside the parallel suite (load 5-10) both tests once
failed in the same run, each with one job one trainer apart in one settled stretch (a
real difference, docs/testing.md run 9). So they are marked `alone`: `make test` runs
them after the parallel part, the two side by side with the machine otherwise idle.

Each plane is this test's own (kwok's stages carry the scenario's latencies, the nodes
its shape), not the session's.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import sys
import time
from pathlib import Path

import pytest

from e2e.control_plane import ControlPlane, k8s_binaries, keep_or_remove
from e2e.fidelity import RealRun, plane_config
from e2e.fidelity_compare import Comparison, compare
from e2e.fidelity_replay import pods_csv
from edl.sim.report import timeline_csv
from edl.sim.runner import run_policy
from edl.sim.scenario import Scenario, expand_jobs, load_scenario
from edl.sim.timeline import Timeline
from edl.sim.timescale import scale_time

UTILISATION_POINTS = 5.0
SETTLE_MARGIN_S = 10.0  # at the production scale; scaled with the scenario
ACTION_LATE_S = 1.0  # a submission or replica change started at most this late
SEEDS = range(8)


def _sim(scenario: Scenario, seeds: range) -> list[Timeline]:
    return [run_policy(scenario, "default", seed).timeline for seed in seeds]


def _run(name: str, scale: float, tmp_path: Path,
         seeds: range) -> tuple[Scenario, Comparison, RealRun]:
    scenario = scale_time(load_scenario(name), scale)
    started = time.monotonic()
    sims = _sim(scenario, seeds)
    plane = ControlPlane(bin_dir=k8s_binaries(), work_dir=tmp_path / "plane",
                         config=plane_config(scenario))
    run = RealRun(plane, scenario, plane.work_dir)
    result = None
    try:
        plane.start()
        run.run()
        plane.check_running()
        result = compare(scenario, sims[0], run.timeline, others=sims[1:])
    finally:
        plane.stop()
        agreed = result is not None and _agree(result, scale, seeds)
        if not agreed:  # keep what explains it next to the control plane's logs
            _keep(run, scenario, sims[0], plane.logs)
        note = keep_or_remove(plane, failed=not agreed)
        if note:
            print(note, file=sys.stderr)
    latencies = list(run.start_latency_s.values())
    print(f"\n{result.table()}\nwall {time.monotonic() - started:.0f} s; latest action "
          f"{run.late_s:.2f} s late; watch lag at most {run.watch_lag_s:.2f} s; bind -> "
          f"Running on kwok over {len(latencies)} pods: mean {statistics.fmean(latencies):.1f}"
          f" s, {min(latencies):.0f}-{max(latencies):.0f} s")
    assert run.late_s < ACTION_LATE_S, "an action started late: the schedule was not kept"
    assert run.watch_lag_s < SETTLE_MARGIN_S * scale, (
        "the watch fell behind by more than the settle margin: its timestamps are late")
    # kwok played the scenario's start latency (the API's timestamps are whole seconds).
    low, high = scenario.pod_start_latency_s.min, scenario.pod_start_latency_s.max
    assert low - 1 <= statistics.fmean(latencies) <= high + 1
    return scenario, result, run


def _check(scale: float, result: Comparison, exact: bool) -> None:
    assert abs(result.util_diff_pct) <= UTILISATION_POINTS, result.table()
    margin = SETTLE_MARGIN_S * scale
    for stretch in result.stretches:
        assert stretch.real_settle_s <= stretch.end - stretch.start - margin, (
            f"the real cluster had not settled {margin:g} s before the next "
            f"event in {stretch.start:g}-{stretch.end:g} s:\n{result.table()}")
        same = stretch.same if exact else stretch.determined
        assert same, (
            f"allocation after the event at {stretch.start:g} s differs:\n{result.table()}")


def _agree(result: Comparison, scale: float, seeds: range) -> bool:
    margin = SETTLE_MARGIN_S * scale
    exact = len(seeds) == 1
    return abs(result.util_diff_pct) <= UTILISATION_POINTS and all(
        (s.same if exact else s.determined) and s.real_settle_s <= s.end - s.start - margin
        for s in result.stretches)


@pytest.mark.alone
@pytest.mark.timeout(900)
def test_simulated_and_real_control_plane_agree(tmp_path: Path) -> None:
    _, result, _ = _run("fidelity", 1.0, tmp_path, range(1))
    _check(1.0, result, exact=True)


@pytest.mark.alone
@pytest.mark.timeout(600)
def test_simulated_and_real_agree_on_a_constrained_cluster(tmp_path: Path) -> None:
    """Taints, a selector, PriorityClasses with kube-scheduler's preemption, a quota."""
    _, result, run = _run("fidelity-constrained", 0.75, tmp_path, SEEDS)
    _check(0.75, result, exact=False)
    # what makes it constrained happened on the real side, not only in the model
    preempted = [e for e in run.events if e.kind == "Pod" and e.type == "MODIFIED"
                 and any(c.get("reason") == "PreemptionByScheduler"
                         for c in (e.obj.get("status") or {}).get("conditions") or [])]
    assert preempted, "kube-scheduler preempted no trainer"
    pods = {e.obj["metadata"]["uid"]: e.obj for e in run.events if e.kind == "Pod"
            and e.type != "RESYNC"}
    gpu_nodes = {f"gpu-{i}" for i in range(3)}
    for pod in pods.values():
        labels, node = pod["metadata"].get("labels") or {}, pod["spec"].get("nodeName")
        if labels.get("edl.dev/role") == "trainer" and node:
            assert (node in gpu_nodes) == (labels.get("edl.dev/job") == "gpu"), (
                f"{pod['metadata']['name']} on {node}")
    research = [s.real.get("research", 0) for s in result.stretches]
    assert max(research) == 4, research  # master pod 1 + 1 pserver + 4 trainers = the 6 CPU


def _keep(run: RealRun, scenario: Scenario, sim: Timeline, logs: Path) -> None:
    """Both timelines, the real run's pod counts and the controller's log, into `logs`."""
    namespaces = {p.name: p.namespace for p in expand_jobs(scenario)}
    workloads = {w.name: w.namespace for w in scenario.workloads}
    with contextlib.suppress(OSError):
        logs.mkdir(parents=True, exist_ok=True)
        (logs / "sim-timeline.csv").write_text(timeline_csv(sim, namespaces, workloads))
        (logs / "real-timeline.csv").write_text(
            timeline_csv(run.timeline, namespaces, workloads))
        (logs / "real-pods.csv").write_text(pods_csv(run.samples))
        shutil.copy(run.log_dir / "controller.log", logs / "edl-controller.log")
