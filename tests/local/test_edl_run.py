"""`edl run` end to end: real etcd, real Controller/Autoscaler, pods as real processes."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from edl.local import procs
from edl.local.process_pods import RUN_MARKER_ENV
from edl.local.status import read_snapshot

from .conftest import (
    DIGITS,
    EDL,
    alive,
    descendants,
    digits_job,
    run_dir_of,
    start_edl_run,
    wait_for,
)

pytestmark = pytest.mark.slow


def test_digits_example_runs_to_completion_with_accuracy(tmp_path: Path) -> None:
    proc = start_edl_run(tmp_path, DIGITS / "job.yaml")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    final = out.strip().splitlines()[-1]
    match = re.search(r"digits Succeeded, accuracy ([0-9.]+)", final)
    assert match, final
    assert float(match.group(1)) >= 0.95
    # issue 24: trainers that exited 0 are no alarm ("no trainer running …, replacements")
    assert "no trainer running" not in out and "replacements starting" not in out, out
    run_dir = run_dir_of(tmp_path)
    assert run_dir is not None
    snapshot = read_snapshot(run_dir)
    assert snapshot.state == "Succeeded"
    passes = yaml.safe_load((DIGITS / "job.yaml").read_text())["spec"]["passes"]
    assert snapshot.passes == passes and snapshot.pass_index == passes - 1
    assert snapshot.tasks_done == snapshot.tasks_total and snapshot.tasks_failed == 0
    assert snapshot.accuracy is not None and snapshot.accuracy >= 0.95
    logs = sorted(p.name for p in run_dir.glob("*.log"))
    assert any(n.startswith("digits-master-") for n in logs)
    assert sum(n.startswith("digits-pserver-") for n in logs) >= 2
    assert any(n.startswith("digits-trainer-") for n in logs)
    assert procs.pids_with_env(RUN_MARKER_ENV, str(run_dir)) == []


def test_ctrl_c_stops_everything_and_leaves_no_process(tmp_path: Path) -> None:
    job = digits_job(tmp_path, passes=10_000)
    proc = start_edl_run(tmp_path, job)
    try:
        run_dir = wait_for(lambda: run_dir_of(tmp_path), 60, "the run directory")
        wait_for(
            lambda: read_snapshot(run_dir).trainers_running >= 1
            and (read_snapshot(run_dir).tasks_done or 0) > 0,
            120,
            "trainers at work",
        )
        below = descendants(proc.pid)
        assert len(below) >= 5, "etcd, master, 2 pservers and trainers should be running"
        shown = subprocess.run(
            [EDL, "status", "digits", "--runs-dir", str(tmp_path / "runs"), "--plain"],
            capture_output=True, text=True, timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert re.match(r"digits: Running, pass \d+/10000, tasks \d+/\d+, trainers \d/\d",
                        shown.stdout), shown.stdout
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, f"stdout:\n{out}\nstderr:\n{err}"
    assert "stopped by SIGINT" in err
    wait_for(lambda: not [p for p in below if alive(p)], 10, "every child to be gone")
    assert procs.pids_with_env(RUN_MARKER_ENV, str(run_dir)) == []
    assert read_snapshot(run_dir).state == "Stopped"


def test_sigkilled_edl_run_takes_its_pods_and_etcd_along(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: even with no chance to clean up, nothing of the run survives."""
    job = digits_job(tmp_path, passes=10_000)
    proc = start_edl_run(tmp_path, job)
    try:
        run_dir = wait_for(lambda: run_dir_of(tmp_path), 60, "the run directory")
        wait_for(lambda: (read_snapshot(run_dir).tasks_done or 0) > 0, 120, "training")
        below = descendants(proc.pid)
        assert len(below) >= 5
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wait_for(lambda: not [p for p in below if alive(p)], 30, "every child to die with its parent")
    assert procs.pids_with_env(RUN_MARKER_ENV, str(run_dir)) == []


def test_script_that_crashes_at_once_fails_the_job_with_its_error(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "crash.py").write_text("print('loading data')\nratio = 1 / 0\n")
    job = tmp_path / "crash.yaml"
    job.write_text(
        "apiVersion: edl.dev/v1\nkind: TrainingJob\nmetadata: {name: crash}\n"
        "spec:\n  trainer:\n    entrypoint: python crash.py\n    workspace: ws\n"
        "    min-instance: 1\n    max-instance: 1\n"
        "    resources: {requests: {cpu: 100m, memory: 64Mi}}\n"
        "  pserver:\n    min-instance: 1\n    max-instance: 1\n"
        "    resources: {requests: {cpu: 100m, memory: 64Mi}}\n"
    )
    # no local crash-loop rule for trainers: the trainer Job's backoffLimit (6) fails it
    proc = start_edl_run(tmp_path, job)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, f"stdout:\n{out}\nstderr:\n{err}"
    assert "crash Failed" in err and "ZeroDivisionError: division by zero" in err
    run_dir = run_dir_of(tmp_path)
    assert run_dir is not None
    snapshot = read_snapshot(run_dir)
    assert snapshot.state == "Failed"
    assert "the trainer Job failed: BackoffLimitExceeded" in snapshot.message
    assert "last failed trainer crash-trainer-" in snapshot.message
    assert snapshot.message.endswith("ZeroDivisionError: division by zero")
    attempts = sorted(run_dir.glob("crash-trainer-*.log"))
    assert len(attempts) >= 7  # backoffLimit + 1 counted failures, each a new pod
    assert procs.pids_with_env(RUN_MARKER_ENV, str(run_dir)) == []


def test_invalid_job_file_names_every_bad_field(tmp_path: Path) -> None:
    job = tmp_path / "bad.yaml"
    job.write_text(
        "apiVersion: edl.dev/v1\nkind: TrainingJob\nmetadata: {name: bad}\n"
        "spec:\n  trainer:\n    min-instance: 3\n    max-instance: 1\n"
    )
    result = subprocess.run([EDL, "run", str(job)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1  # bad input (usage errors are 2)
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "spec.trainer" in result.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_timeout_fails_the_run_and_cleans_up(tmp_path: Path) -> None:
    proc = start_edl_run(tmp_path, digits_job(tmp_path, passes=10_000), "--timeout", "4")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, f"stdout:\n{out}\nstderr:\n{err}"
    assert "digits Failed: did not finish within 4 s" in err
    run_dir = run_dir_of(tmp_path)
    assert run_dir is not None and read_snapshot(run_dir).state == "Failed"
    assert procs.pids_with_env(RUN_MARKER_ENV, str(run_dir)) == []
