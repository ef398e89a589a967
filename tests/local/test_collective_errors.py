"""A collective script's own error reaches the user (real processes): in the live
lines while torch restarts it, and first in the final reason; the checkpoint
directory edl promises exists before the script starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from edl.local import procs
from edl.local.process_pods import RUN_MARKER_ENV
from edl.local.status import read_snapshot

from .conftest import run_dir_of, start_edl_run

pytestmark = [pytest.mark.timeout(300)]

# no torch in the worker: it writes into the promised directory, then raises
SCRIPT = """\
import sys
with open(sys.argv[1], "w") as out:  # FileNotFoundError if the directory did not exist
    out.write("checkpoint")
raise ValueError("bad learning rate: -1")
"""


def test_a_ddp_script_that_raises_ends_the_run_with_its_own_line(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "fail.py").write_text(SCRIPT)
    job = tmp_path / "fail.yaml"
    job.write_text(
        "apiVersion: edl.dev/v1\nkind: TrainingJob\nmetadata: {name: ddp-fail}\n"
        "spec:\n  mode: collective\n  trainer:\n"
        "    entrypoint: python fail.py $(EDL_CHECKPOINT_DIR)/model.pt\n"
        "    workspace: ws\n    min-instance: 1\n    max-instance: 1\n"
        "    resources: {requests: {cpu: 100m, memory: 64Mi}}\n"
    )
    proc = start_edl_run(tmp_path, job)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, f"stdout:\n{out}\nstderr:\n{err}"
    # while torch restarted it (max-restarts 100), every failure was one line with the error
    assert "the script failed: ValueError: bad learning rate: -1; torch restarts them (" in out
    reason = err.strip().splitlines()[0]
    assert reason.startswith("edl run: ddp-fail Failed: "), err
    assert "ValueError: bad learning rate: -1" in reason, err
    assert "To enable traceback" not in reason and "RendezvousClosedError" not in reason
    assert "crash loop" in reason  # --max-error-exits (3) failures in a row, not 100 restarts
    run_dir = run_dir_of(tmp_path)
    assert run_dir is not None
    assert (run_dir / "checkpoints" / "model.pt").read_text() == "checkpoint"
    snapshot = read_snapshot(run_dir)
    assert snapshot.state == "Failed" and "ValueError: bad learning rate: -1" in snapshot.message
    assert any("ValueError: bad learning rate: -1" in text for _, text in snapshot.events)
    assert procs.pids_with_env(RUN_MARKER_ENV, str(run_dir)) == []
