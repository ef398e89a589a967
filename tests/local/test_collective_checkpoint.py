"""A collective job whose rank 0 cannot checkpoint is a fault line while it can still be
fixed, the line clears when the directory works again, and the run's last word names
rank 0's last checkpoint (a real `edl run`: torchrun, one worker; the script saves its
own checkpoint into EDL_CHECKPOINT_DIR at its start and its end, so the directory
breaking between is seen only by the agent's probe, before a save would fail)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edl.local import procs
from edl.local.process_pods import RUN_MARKER_ENV
from edl.local.status import read_snapshot

from .conftest import run_dir_of, start_edl_run, wait_for

SCRIPT = """\
import os, sys, time, pathlib
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
checkpoint = pathlib.Path(os.environ["EDL_CHECKPOINT_DIR"]) / "state.pt"
if rank == 0:
    checkpoint.write_text("step 0")
step = 0
while not pathlib.Path(sys.argv[1]).exists():
    step += 1
    print(f"step={step}", flush=True)
    time.sleep(0.2)
if rank == 0:
    checkpoint.write_text(f"step {step}")
dist.barrier()
"""


def _events(run_dir: Path, text: str) -> list[tuple[float, str]]:
    return [(at, line) for at, line in read_snapshot(run_dir).events if text in line]


@pytest.mark.timeout(300)
def test_rank_0_that_cannot_checkpoint_is_a_fault_until_it_can(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "train.py").write_text(SCRIPT)
    go = tmp_path / "go"
    job = tmp_path / "ckpt.yaml"
    job.write_text(
        "apiVersion: edl.dev/v1\nkind: TrainingJob\nmetadata: {name: ckpt}\n"
        "spec:\n  mode: collective\n  trainer:\n"
        f"    entrypoint: python train.py {go}\n    workspace: {workspace}\n"
        "    min-instance: 1\n    max-instance: 1\n"
        "    resources: {requests: {cpu: 100m, memory: 64Mi}}\n")
    proc = start_edl_run(tmp_path, job)
    try:
        run_dir = wait_for(lambda: run_dir_of(tmp_path), 60, "the run directory")
        checkpoints = run_dir / "checkpoints"
        wait_for(lambda: (checkpoints / "state.pt").exists(), 120, "the first checkpoint")
        checkpoints.rename(run_dir / "away")  # the directory replaced by a file
        checkpoints.write_text("a file where the checkpoint directory was")
        broken_at = time.monotonic()
        [(_, line)] = wait_for(lambda: _events(run_dir, "cannot checkpoint"), 30,
                               "the fault line")
        assert time.monotonic() - broken_at < 10, "said within seconds"
        assert line.startswith("rank 0 on ckpt-trainer-") and "Not a directory" in line
        # the checkpoint the probe saw last (none if the directory broke before a probe)
        assert ("the training since its last checkpoint (state.pt, " in line
                or "the training since the start (no checkpoint yet)" in line), line
        assert ") is lost if the workers restart" in line
        checkpoints.unlink()
        (run_dir / "away").rename(checkpoints)
        fixed_at = time.monotonic()
        wait_for(lambda: _events(run_dir, "can checkpoint again"), 30, "the clearing line")
        assert time.monotonic() - fixed_at < 10
        go.write_text("done")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    final = out.strip().splitlines()[-1]
    assert "ckpt Succeeded" in final and "last state saved (rank 0 on ckpt-trainer-" in final
    assert ": state.pt, written " in final and " s before its workers ended)" in final, final
    assert read_snapshot(run_dir).checkpoint.startswith("last state saved (rank 0 on ")
    assert procs.pids_with_env(RUN_MARKER_ENV, str(run_dir)) == []
