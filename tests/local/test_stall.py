"""No silent hang: a job whose progress does not move is said, naming its running
trainers, and ended at --stall-limit (a real `edl run` of a script stuck in a loop);
the warning time defaults to the job's own measured gaps (pure)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edl.local import procs
from edl.local.process_pods import RUN_MARKER_ENV
from edl.local.stall import DEFAULT_FLOOR_S, StallWatch
from edl.local.status import read_snapshot

from .conftest import run_dir_of, start_edl_run

RUNNING = ["job-trainer-abc (pid 42)"]


def test_the_warning_time_follows_the_jobs_own_gaps_and_progress_clears_it() -> None:
    watch = StallWatch()
    assert watch.observe(0, 0.0, RUNNING) == ([], "")
    assert watch.observe(1, 30.0, RUNNING) == ([], "")  # a 30 s step: 10x is 300 s
    assert watch.threshold() == 300.0
    assert watch.observe(1, 30.0 + 299, RUNNING) == ([], "")
    lines, fatal = watch.observe(1, 30.0 + 301, RUNNING)
    assert lines == ["no progress for 301 s: job-trainer-abc (pid 42) running but not "
                     "advancing (stuck in a loop? waiting on something?)"] and fatal == ""
    assert watch.observe(1, 400.0, RUNNING) == ([], "")  # said once
    assert watch.observe(2, 401.0, RUNNING) == (["progress again: the job moves"], "")
    assert StallWatch().threshold() == DEFAULT_FLOOR_S  # before any gap is measured


def test_no_running_trainer_is_no_stall_and_the_limit_ends_the_run() -> None:
    watch = StallWatch(warn_after_s=5, limit_s=10)
    watch.observe(0, 0.0, RUNNING)
    assert watch.observe(0, 100.0, []) == ([], "")  # waiting for a pod: other lines say why
    assert watch.observe(0, 104.0, RUNNING) == ([], "")  # the clock restarted at 100
    lines, fatal = watch.observe(0, 106.0, RUNNING)
    assert "ends the run after 10 s (--stall-limit)" in lines[0] and fatal == ""
    lines, fatal = watch.observe(0, 111.0, RUNNING)
    assert lines == [] and fatal == (
        "stalled: no progress for 11 s (--stall-limit 10): job-trainer-abc (pid 42)")


HANG = "import time\nwhile True:\n    time.sleep(0.5)\n"


@pytest.mark.timeout(200)
def test_a_script_stuck_in_a_loop_is_named_and_ended_at_the_limit(tmp_path: Path) -> None:
    (tmp_path / "hang.py").write_text(HANG)
    job = tmp_path / "hang.yaml"
    job.write_text(
        "apiVersion: edl.dev/v1\nkind: TrainingJob\nmetadata: {name: hang}\n"
        "spec:\n  fault_tolerant: true\n  passes: 1\n"
        "  trainer:\n    entrypoint: python hang.py\n    workspace: .\n"
        "    min-instance: 1\n    max-instance: 1\n"
        "    resources: {requests: {cpu: 100m, memory: 64Mi}}\n"
        "  pserver:\n    min-instance: 1\n    max-instance: 1\n"
        "    resources: {requests: {cpu: 100m, memory: 64Mi}}\n"
    )
    started = time.monotonic()
    proc = start_edl_run(tmp_path, job, "--stall-warning", "3", "--stall-limit", "8")
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == 1, f"stdout:\n{out}\nstderr:\n{err}"
    assert "no progress for 3 s: hang-trainer-" in out, out
    reason = err.strip().splitlines()[0]
    assert reason.startswith("edl run: hang Failed: stalled: no progress for 8 s"), err
    assert time.monotonic() - started < 120
    run_dir = run_dir_of(tmp_path)
    assert run_dir is not None and read_snapshot(run_dir).state == "Failed"
    assert procs.pids_with_env(RUN_MARKER_ENV, str(run_dir)) == []
