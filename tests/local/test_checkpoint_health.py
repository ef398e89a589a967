"""A pserver that cannot checkpoint is a fault line while it can still be fixed, the line
clears when it recovers, and the run's last word says whether the last state was saved
(real `edl run` of the paced digits example; the health lines' wording, pure)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edl.local import procs
from edl.local.checkpoints import final_word, health_events
from edl.local.process_pods import RUN_MARKER_ENV
from edl.local.status import read_snapshot
from paced import paced_digits

from .conftest import digits_job, run_dir_of, start_edl_run, wait_for

FAILING = {"ok": False, "error": "[Errno 28] No space left on device", "saved_version": 7}


def test_a_failure_a_new_error_and_a_recovery_are_one_line_each() -> None:
    assert health_events({}, {"0": FAILING}) == [
        "pserver 0 cannot checkpoint: [Errno 28] No space left on device; its state since "
        "version 7 (its last checkpoint) is lost if it dies — fix the checkpoint directory "
        "(EDL_CHECKPOINT_DIR)"]
    assert health_events({"0": FAILING}, {"0": FAILING}) == []  # said once
    other = {**FAILING, "error": "[Errno 30] Read-only file system", "saved_version": -1}
    assert "its whole state is lost" in health_events({"0": FAILING}, {"0": other})[0]
    assert health_events({"0": FAILING}, {"0": {"ok": True, "saved_version": 9}}) == [
        "pserver 0 checkpoints again (version 9 saved)"]
    assert final_word({"0": {"ok": True, "saved_version": 9}, "1": FAILING}) == (
        "last state NOT saved (pserver 1: [Errno 28] No space left on device)")
    assert final_word({"0": {"ok": True, "saved_version": 9}}) == (
        "last state saved (pserver 0 version 9)")
    assert final_word({}) == ""


def _events(run_dir: Path, text: str) -> list[tuple[float, str]]:
    return [(at, line) for at, line in read_snapshot(run_dir).events if text in line]


@pytest.mark.timeout(400)
def test_a_pserver_that_cannot_checkpoint_is_a_fault_until_it_can(tmp_path: Path) -> None:
    workspace = paced_digits(tmp_path / "paced", 0.02)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the checkpoint directory should be")
    job = digits_job(
        tmp_path, "ckpt", workspace=workspace, passes=20,
        trainer={"entrypoint": "python train.py", "workspace": str(workspace),
                 "min-instance": 1, "max-instance": 1,
                 "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}},
        pserver={"min-instance": 1, "max-instance": 1,
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                 "env": [{"name": "EDL_CHECKPOINT_DIR", "value": str(blocker / "ckpt")}]},
    )
    proc = start_edl_run(tmp_path, job, "--checkpoint-interval", "1")
    try:
        run_dir = wait_for(lambda: run_dir_of(tmp_path), 60, "the run directory")
        wait_for(lambda: (read_snapshot(run_dir).tasks_done or 0) > 0, 180, "training")
        trained_at = read_snapshot(run_dir).elapsed_s
        [(at, line)] = wait_for(lambda: _events(run_dir, "pserver 0 cannot checkpoint"), 30,
                                "the fault line")
        assert "Not a directory" in line and "is lost if it dies" in line
        assert at - trained_at < 10, "said within seconds of the first update"
        blocker.unlink()
        (blocker / "ckpt").mkdir(parents=True)
        fixed_at = time.monotonic()
        wait_for(lambda: _events(run_dir, "pserver 0 checkpoints again"), 30, "the clearing line")
        assert time.monotonic() - fixed_at < 15
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    final = out.strip().splitlines()[-1]
    assert "Succeeded" in final and "last state saved (pserver 0 version" in final, final
    assert read_snapshot(run_dir).checkpoint.startswith("last state saved")
    assert procs.pids_with_env(RUN_MARKER_ENV, str(run_dir)) == []
