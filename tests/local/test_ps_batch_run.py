"""`edl run` of a parameter-server job with spec.batch under `--policy goodput` (issues 22
and 32): the JobParser tells the pods the initial batch, the pservers measure φ, the
trainers their compute rate, the policy chooses a larger batch mid-run, and the master
hands every trainer its share at its next task: the batch changes without a restart."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from edl.local.status import read_snapshot

from .conftest import digits_job, run_dir_of, start_edl_run

pytestmark = pytest.mark.slow


def test_a_ps_job_changes_its_batch_mid_run_without_a_restart(tmp_path: Path) -> None:
    """The run shows the job's batch and what its shards measured of φ; the goodput
    policy raises the batch while the job trains (its trainers' pushes are mostly
    overhead on this small model: the measured compute rate says a larger per-trainer
    batch amortises it), the master's count of tasks finished at each per-trainer batch
    shows the same three trainer processes training at two batches, and accuracy ≥ 0.95.

    On this job φ is about 2.7e4 samples (docs/local.md), far above its batches, so in
    some runs the shards' summed |G|² estimate is still not positive at the end: then φ
    is unresolved, and the run must say so (never show a made-up φ or nothing). When it
    is resolved, the figure and the batch's efficiency must be finite and in range.
    """
    job = digits_job(tmp_path, "digits-batch", passes=60,
                     batch={"initial": 64, "max": 512})
    proc = start_edl_run(tmp_path, job, "--policy", "goodput")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    assert "noise scale" in out, out
    run_dir = run_dir_of(tmp_path)
    assert run_dir is not None
    snapshot = read_snapshot(run_dir)
    assert snapshot.state == "Succeeded"
    assert snapshot.batch is not None and 64 <= snapshot.batch <= 512
    if snapshot.noise_scale is None:
        assert snapshot.noise_unresolved, "neither a noise scale nor the unresolved state"
        assert "noise scale unresolved" in out, out
        assert snapshot.efficiency is None
    else:
        assert 0 < snapshot.noise_scale < math.inf
        assert snapshot.efficiency is not None and 0 < snapshot.efficiency <= 1.0
    assert snapshot.accuracy is not None and snapshot.accuracy >= 0.95
    trained_at = {int(b): n for b, n in snapshot.trainer_batches.items() if n > 0}
    # tasks at the initial batch's shares (64 alone .. 22 of three) and, once the policy
    # raised it, at shares above the whole initial batch: the batch changed mid-run
    assert min(trained_at) <= 64 < max(trained_at), trained_at
    assert snapshot.batch > 64
    trainers = [pod for pod in snapshot.pods if pod.role == "trainer"]
    assert len(trainers) == 3 and all(p.phase == "Succeeded" for p in trainers), trainers
