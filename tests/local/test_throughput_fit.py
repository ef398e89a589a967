"""A real local run: the master's measured throughput at 3, 2 and 1 trainers, and the
Autoscaler's online fit of the job's scaling curve tracking it within 20 %."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from edl.local.run import LocalRun, RunOptions
from paced import paced_digits
from polling import eventually

from .conftest import DIGITS, digits_job

pytestmark = pytest.mark.slow
POINTS_PER_COUNT = 8


async def test_fitted_curve_tracks_measured_throughput_at_1_2_3_trainers(tmp_path: Path) -> None:
    # paced steps (0.1 s each): the rate is set by the job, not by how loaded the machine is
    workspace = paced_digits(tmp_path / "paced", 0.1)
    job = yaml.safe_load(digits_job(tmp_path, passes=1000).read_text())
    job["spec"]["trainer"]["workspace"] = str(workspace)
    job["metadata"]["annotations"] = {"edl.dev/throughput-prior": '{"per_trainer": 100}'}
    # a virtual 2-core node: master 100m + pservers 200m + 3 x 250m trainers fit; another
    # tenant holding 1000m leaves room for 2 trainers, 1200m for 1
    options = RunOptions(runs_root=tmp_path / "runs", cpu="2", memory="8Gi",
                         autoscale_interval_s=1.0, job_dir=DIGITS, timeout_s=600,
                         policy="goodput")
    run = LocalRun(job, options)
    key = (run.namespace, run.name)

    def points_at(count: int) -> list[float]:
        return [o.samples_per_s for o in run.throughput.board.history(*key) if o.trainers == count]

    async def hold(count: int) -> None:
        await eventually(lambda: run.snapshot.trainers_running == count
                         and run.snapshot.trainers_desired == count, 180, f"{count} trainers",
                         interval=0.25)
        seen = len(points_at(count))
        await eventually(lambda: len(points_at(count)) >= seen + POINTS_PER_COUNT + 4, 180,
                         f"{POINTS_PER_COUNT} measurements at {count} trainers", interval=0.25)

    try:
        await run.start()
        waiter = asyncio.create_task(run.wait())
        await hold(3)
        run.reserve("tenant-a", cpu="1000m")
        await hold(2)
        run.reserve("tenant-b", cpu="200m")
        await hold(1)
        assert not waiter.done(), "the job must still be training"
        autoscaler = run.loops.autoscaler
        assert autoscaler is not None
        await autoscaler.scaling.scaling(key, 0.0)  # take in the newest points
        fit = autoscaler.scaling.fit(key)
        assert fit is not None
        curve = fit.curve()
        assert curve is not None
        for count in (1, 2, 3):
            measured = points_at(count)[-POINTS_PER_COUNT:]
            mean = sum(measured) / len(measured)
            assert curve.rate(count) == pytest.approx(mean, rel=0.2), (count, measured, curve)
        assert run.snapshot.fitted_samples_per_s is not None  # shown by edl run
    finally:
        await run.close(None)
