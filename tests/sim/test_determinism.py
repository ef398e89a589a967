"""Same scenario and seed -> byte-identical metrics.json, in-process and across processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from edl.sim.report import metrics_json
from edl.sim.runner import run_policy
from edl.sim.scenario import load_scenario

EDL = [sys.executable, "-m", "edl.cli.main"]


def test_same_seed_same_bytes_in_process() -> None:
    scenario = load_scenario("case2")
    first = run_policy(scenario, "default", seed=3)
    second = run_policy(scenario, "default", seed=3)
    assert metrics_json(first.metrics) == metrics_json(second.metrics)
    assert first.timeline == second.timeline
    other = run_policy(scenario, "default", seed=4)
    assert other.timeline != first.timeline  # the seed does drive the start latencies


def test_same_seed_same_file_across_processes(tmp_path: Path) -> None:
    outputs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"run-{hash_seed}"
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        subprocess.run(
            [*EDL, "simulate", "case1", "--policy", "reference", "--seed", "7", "--out", str(out)],
            check=True, env=env, capture_output=True, timeout=300,
        )
        outputs.append((out / "metrics.json").read_bytes())
    assert outputs[0] == outputs[1]
