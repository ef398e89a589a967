"""`edl run` of a parameter-server job with spec.batch (issue 22): the JobParser tells the
pods the initial batch, the pservers measure φ, and the run shows batch, noise scale and
efficiency from the master's progress."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from edl.local.status import read_snapshot

from .conftest import digits_job, run_dir_of, start_edl_run

pytestmark = pytest.mark.slow


def test_a_ps_job_adapting_its_batch_shows_its_noise_scale(tmp_path: Path) -> None:
    """The run shows the job's batch and what its shards measured of φ.

    On this job φ is about 2.7e4 samples (docs/local.md), far above its batches, so in
    some runs the shards' summed |G|² estimate is still not positive at the end: then φ
    is unresolved, and the run must say so (never show a made-up φ or nothing). When it
    is resolved, the figure and the batch's efficiency must be finite and in range.
    """
    job = digits_job(tmp_path, "digits-batch", passes=10,
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
    assert snapshot.accuracy is not None and snapshot.accuracy >= 0.9
