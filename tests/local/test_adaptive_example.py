"""examples/digits-adaptive under `edl run`: a DDP script with edl's batch-adaptation
helper measures a finite, positive gradient noise scale, keeps its batch between
restarts, shows batch, φ and efficiency, and still reaches its accuracy (issue 22)."""

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
    proc = start_edl_run(tmp_path, EXAMPLE / "job.yaml")
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
    # the batch is the one the workers started with: it changes only at a restart
    # (the job was never given another, so it never changed)
    logs = "".join(p.read_text(errors="replace") for p in run_dir.glob("*trainer*.log"))
    batches = {float(b) for b in re.findall(r"\bbatch=([0-9.]+)", logs)}
    assert batches == {32.0}, batches
