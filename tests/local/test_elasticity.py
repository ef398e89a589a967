"""Elasticity on one machine: another tenant takes a share, the Autoscaler shrinks the job
while it trains, the share is given back, the job grows again — and no task is lost."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import yaml

from edl.local import procs
from edl.local.process_pods import RUN_MARKER_ENV
from edl.local.run import LocalRun, RunOptions
from paced import paced_digits

from .conftest import DIGITS, digits_job

pytestmark = pytest.mark.slow


async def until(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.25)


async def test_reserved_share_shrinks_then_grows_the_job_with_no_task_lost(tmp_path: Path) -> None:
    # paced (0.03 s a step): the job lasts about as long on an idle machine as on a
    # loaded one and cannot finish before it has grown back
    workspace = paced_digits(tmp_path / "paced", 0.03)
    job = yaml.safe_load(digits_job(tmp_path, passes=40).read_text())
    job["spec"]["trainer"]["workspace"] = str(workspace)
    # A virtual 2-core node: master 100m + 2 pservers 200m + 3 trainers 750m fit;
    # holding 1.2 cores for another tenant leaves room for one trainer only.
    options = RunOptions(runs_root=tmp_path / "runs", cpu="2", memory="8Gi",
                         autoscale_interval_s=1.0, job_dir=DIGITS, timeout_s=280)
    run = LocalRun(job, options)
    result = None
    try:
        await run.start()
        waiter = asyncio.create_task(run.wait())
        await until(lambda: run.snapshot.trainers_running == 3
                    and (run.snapshot.tasks_done or 0) > 0, 120, "3 trainers at work")
        run.reserve("other-tenant", cpu="1200m")
        await until(lambda: run.snapshot.trainers_desired == 1, 60, "the job to shrink to 1")
        await until(lambda: any(p.name == "other-tenant" and p.phase == "Running"
                                for p in run.snapshot.pods), 60, "the tenant's pod to run")
        assert not waiter.done(), "the job must still be training when it shrinks"
        shrunk_at_pass = run.snapshot.pass_index
        run.release("other-tenant")
        await until(lambda: run.snapshot.trainers_desired == 3, 60, "the job to grow to 3")
        await until(lambda: run.snapshot.trainers_running == 3, 120, "3 trainers running again")
        result = await asyncio.wait_for(waiter, 280)
    finally:
        await run.close(result)
    assert result is not None and result.state == "Succeeded", result
    history = [desired for _, desired in run.desired_history]
    assert 3 in history and 1 in history, run.desired_history
    shrink = history.index(1)
    assert history.index(3) < shrink and 3 in history[shrink:], run.desired_history
    final = run.snapshot
    assert final.passes == 40 and final.pass_index == 39
    assert final.tasks_done == final.tasks_total, "every task of the last pass finished"
    assert final.tasks_failed == 0, "no task dropped by the shrink"
    assert final.accuracy is not None and final.accuracy >= 0.9
    assert shrunk_at_pass is not None and shrunk_at_pass < 39
    trainer_logs = list(run.run_dir.glob("digits-trainer-*.log"))
    assert len(trainer_logs) >= 4, "a new trainer was started when the job grew back"
    assert procs.pids_with_env(RUN_MARKER_ENV, str(run.run_dir)) == []
    # the decisions and the drains as the user reads them: a reason each, no failures
    lines = [text for _, text in final.events]
    assert any(t.startswith("autoscaler: trainers 3 -> 1: shrink 3->1") for t in lines), lines
    assert not [t for t in lines if t.startswith("trainer ") and "exited" in t], lines
    drained = [p for p in final.pods if p.role == "trainer" and p.exit_code == 143]
    assert all(p.phase == "Stopped" for p in drained), final.pods
