"""Scale: 500 kwok nodes and 20 elastic jobs (about 500 pods) on the real control plane.

bench/kube_inquiry.py's targets are for 5,000 nodes and 150,000 pods: the in-memory part
of a tick under 100 ms and the cache under 500 MB. Here the tick is the whole autoscaler
tick as `edl_plan_duration_seconds` measures it — including one API read of each job's
trainer Job, which the bench does not count — on a machine shared with the control plane.
What must hold is that the controller keeps up with its interval (1 s here): the
ticks it takes in a 10 s window at steady state (at least 5), and its process's CPU per
tick (user + system over the window, all its work included) under half the interval.
The tick's wall time (the metric) is printed, not asserted: on this 2-core machine
shared with three other test workers and their control planes it also counts the time
the controller waits for a core (a loaded run measured 1,248 ms of wall for 188 ms of
CPU per tick), which the controller does not control; the wall figure of planning
belongs to bench/plan.py, on an idle machine. The figures are recorded in
docs/kubernetes.md against the bench's 100 ms. Memory is the whole process's RSS
(Python, kopf, lightkube and the caches), held to 200 MB.
"""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import pytest

from e2e.control_plane import ControlPlane
from e2e.helpers import trainingjob, wait_trainers
from e2e.rest import Rest
from polling import wait_until

NODES = 500
JOBS = 20
MAX_TRAINERS = 20
INTERVAL_S = 1.0  # the --interval of helpers.CONTROLLER_ARGS
TARGET_TICK_CPU_S = 0.5  # half of it
WINDOW_S = 10  # the steady-state window
TARGET_RSS_MB = 200


def metric_values(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        lines = answer.read().decode().splitlines()
    return {k: float(v) for k, _, v in (line.rpartition(" ") for line in lines)
            if k.startswith("edl_")}


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU so far (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.timeout(1200)
def test_500_nodes_and_20_jobs(rest: Rest, plane: ControlPlane, namespace: str,
                               start_controller) -> None:
    nodes = plane.add_nodes(NODES, prefix="kwok-scale")
    try:
        controller = start_controller("replica-a")
        started = time.monotonic()
        for i in range(JOBS):
            rest.create(trainingjob(f"job-{i:02d}", min_instance=2, max_instance=MAX_TRAINERS,
                                    trainer_cpu="1"), namespace)
        for i in range(JOBS):
            wait_trainers(rest, namespace, f"job-{i:02d}", MAX_TRAINERS, timeout=600)
        settled = time.monotonic() - started
        before = metric_values(controller.port)
        cpu_before = cpu_seconds(controller.proc.pid)
        time.sleep(WINDOW_S)  # ten more ticks at steady state
        cpu = cpu_seconds(controller.proc.pid) - cpu_before
        after = metric_values(controller.port)
        ticks = after["edl_plan_duration_seconds_count"] - before[
            "edl_plan_duration_seconds_count"]
        mean_tick = (after["edl_plan_duration_seconds_sum"]
                     - before["edl_plan_duration_seconds_sum"]) / ticks
        memory = rss_mb(controller.proc.pid)
        print(f"\n{NODES + plane.config.nodes} nodes, {JOBS} jobs x {MAX_TRAINERS} trainers: "
              f"settled in {settled:.0f} s; mean tick {mean_tick * 1000:.1f} ms wall, "
              f"{cpu / ticks * 1000:.1f} ms CPU over {ticks:.0f} ticks; "
              f"controller RSS {memory:.0f} MB")
        assert after["edl_cluster_nodes"] == NODES + plane.config.nodes
        assert ticks >= WINDOW_S / INTERVAL_S / 2  # it keeps up with its interval
        assert cpu / ticks < TARGET_TICK_CPU_S
        assert memory < TARGET_RSS_MB
    finally:
        for i in range(JOBS):
            rest.delete("TrainingJob", f"job-{i:02d}", namespace)
        wait_until(lambda: not rest.list("Pod", namespace), 300, "the jobs' pods removed")
        for name in nodes:
            rest.delete("Node", name)
