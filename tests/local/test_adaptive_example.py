"""examples/digits-adaptive under `edl run --policy goodput`: a DDP script with edl's
batch-adaptation helper measures a finite, positive gradient noise scale, which the
Autoscaler reads; the batch it chooses reaches the workers at a restart (the same batch
on every line of a round), grows at least once, is shown with φ and efficiency, and
the script still reaches its accuracy (issue 22); each restart's measured pause reaches
the Autoscaler (issue 32)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from edl.local.status import read_snapshot

from .conftest import REPO, run_dir_of, start_edl_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLE = REPO / "examples" / "digits-adaptive"


def test_the_adaptive_example_measures_its_noise_scale_and_reaches_its_accuracy(
    tmp_path: Path,
) -> None:
    proc = start_edl_run(tmp_path, EXAMPLE / "job.yaml", "--policy", "goodput")
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    final = out.strip().splitlines()[-1]
    match = re.search(r"digits-adaptive Succeeded, accuracy ([0-9.]+)", final)
    assert match and float(match.group(1)) >= 0.95, final
    assert re.search(r"batch \d+, noise scale \d+, efficiency [0-9.]+", out), out
    run_dir = run_dir_of(tmp_path)
    assert run_dir is not None
    snapshot = read_snapshot(run_dir)
    assert snapshot.noise_scale is not None and math.isfinite(snapshot.noise_scale)
    assert snapshot.noise_scale > 0
    assert snapshot.efficiency is not None and 0 < snapshot.efficiency <= 1
    # each restart's pause, measured by the new world's rank 0 and published with its
    # metrics, reached the Autoscaler's board and its smoothed figure (issue 32)
    assert snapshot.resizes_measured >= 1, snapshot
    assert snapshot.resize_pause_s is not None and 0 < snapshot.resize_pause_s < 600
    # rank 0 prints a metrics line per epoch and "resumed from epoch" when a round starts
    # from the checkpoint: within a round (a log's lines between two such lines) the
    # batch never changes; the first round runs the initial batch; a later one a larger
    rounds: list[set[float]] = []
    for log in sorted(run_dir.glob("*trainer*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("resumed from epoch") or not rounds:
                rounds.append(set())
            found = re.search(r"\bbatch=([0-9.]+)", line)
            if found and line.startswith("epoch="):
                rounds[-1].add(float(found.group(1)))
    rounds = [batches for batches in rounds if batches]
    assert all(len(batches) == 1 for batches in rounds), rounds
    assert {32.0} in rounds, rounds
    assert max(max(batches) for batches in rounds) > 32.0, rounds  # it grew, at a restart
    assert "a new batch was published: restarting the workers" in "".join(
        log.read_text(errors="replace") for log in run_dir.glob("*trainer*.log")), rounds
