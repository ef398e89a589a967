"""examples/digits-adaptive under `edl run --policy goodput`: a DDP script with edl's
batch-adaptation helper measures a finite, positive gradient noise scale, which the
Autoscaler reads; the batch it chooses waits for the world's next re-formation (a
resize, or a SIGKILLed worker: torch restarts the round; no restart is made for the
batch alone, `tests/runtime/test_batch_next_round.py`) and reaches every worker there
(the same batch on every line of a round), is shown with φ and efficiency, and the
script still reaches its accuracy (issue 22); a restart's measured pause reaches the
Autoscaler (issue 32)."""

from __future__ import annotations

import asyncio
import math
import os
import re
import signal
from pathlib import Path

import pytest
import yaml

from edl.local.run import LocalRun, RunOptions
from edl.runtime.collective.batch import read_batch

from .conftest import REPO
from .test_collective_chaos import assert_finished_well, until, worker_pids

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLE = REPO / "examples" / "digits-adaptive"


async def test_the_adaptive_example_takes_its_chosen_batch_at_the_next_round(
    tmp_path: Path,
) -> None:
    job = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    options = RunOptions(runs_root=tmp_path / "runs", job_dir=EXAMPLE, policy="goodput",
                         timeout_s=420)
    run = LocalRun(job, options)
    result = None
    try:
        await run.start()
        waiter = asyncio.create_task(run.wait())
        endpoints = run.snapshot.etcd_endpoints or ""

        def chosen() -> int | None:
            return read_batch(endpoints, run.namespace, run.name)

        await until(lambda: (chosen() or 0) > 32 or waiter.done(), 300, "a batch chosen")
        assert not waiter.done(), "the job ended before the Autoscaler chose a batch"
        # the Autoscaler may also have resized the job (a new round, which takes the
        # batch published then); a killed worker re-forms the world in any case
        await until(lambda: worker_pids(run) or waiter.done(), 120, "the workers")
        restarts = run.snapshot.restarts
        os.kill(worker_pids(run)[0], signal.SIGKILL)
        await until(lambda: run.snapshot.restarts > restarts or waiter.done(), 120,
                    "a new round")
        result = await asyncio.wait_for(waiter, 360)
    finally:
        await run.close(result)
    assert_finished_well(run, result)
    snapshot = run.snapshot
    assert snapshot.noise_scale is not None and math.isfinite(snapshot.noise_scale)
    assert snapshot.noise_scale > 0
    assert snapshot.efficiency is not None and 0 < snapshot.efficiency <= 1
    # a restart's pause, measured by the new world's rank 0 and published with its
    # metrics, reached the Autoscaler's board and its smoothed figure (issue 32)
    assert snapshot.resizes_measured >= 1, snapshot
    assert snapshot.resize_pause_s is not None and 0 < snapshot.resize_pause_s < 600
    # rank 0 prints a metrics line per epoch and "resumed from epoch" when a round starts
    # from the checkpoint: within a round (a log's lines between two such lines) the
    # batch never changes; the first round runs the initial batch; a later one the chosen
    rounds: list[set[float]] = []
    for log in sorted(run.run_dir.glob("*trainer*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("resumed from epoch") or not rounds:
                rounds.append(set())
            found = re.search(r"\bbatch=([0-9.]+)", line)
            if found and line.startswith("epoch="):
                rounds[-1].add(float(found.group(1)))
    rounds = [batches for batches in rounds if batches]
    assert all(len(batches) == 1 for batches in rounds), rounds
    assert rounds[0] == {32.0}, rounds
    assert max(max(batches) for batches in rounds) > 32.0, rounds  # it grew, at the restart
