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
    assert snapshot.noise_scale is not None and 0 < snapshot.noise_scale < math.inf
    assert snapshot.efficiency is not None and 0 < snapshot.efficiency <= 1.0
    assert snapshot.accuracy is not None and snapshot.accuracy >= 0.9
