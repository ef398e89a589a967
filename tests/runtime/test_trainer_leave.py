"""A trainer leaving on SIGTERM gives back what the master has it holding.

The handler runs between two bytecodes of the training loop, often right after a
GetTask reply arrived and before the loop recorded the task. The script below
stands in that window on purpose: it takes a task the training loop never sees,
then receives SIGTERM. Real master, pserver, trainer and etcd; the trainer TTL and
task timeout are far beyond the test, so only the goodbye can bring the task back.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = """\
import os, signal, time
import torch
import edl.runtime.trainer as edl
from edl.runtime.proto import runtime_pb2 as pb

job = edl.connect(torch.nn.Linear(4, 2), "sgd", lr=0.1)
job.master.call("SetDataset", pb.Dataset(num_samples=64, chunk_size=8, chunks_per_task=2))
reply = job.master.call("GetTask", pb.TaskRequest(trainer=job.name))
assert reply.status == pb.TaskReply.TASK, reply
print("holding task", reply.task.id, flush=True)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(60)
"""


def test_sigterm_returns_a_task_the_loop_never_saw(job, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "leave.py").write_text(SCRIPT)
    job.env.update(
        EDL_PSERVERS="1", EDL_TRAINER_TTL="300", EDL_TASK_TIMEOUT="300",
        EDL_WORKSPACE=str(workspace), EDL_ENTRYPOINT="python leave.py",
    )  # fmt: skip
    job.start("master", "master-0")
    job.start("pserver", "pserver-0")
    job.start("trainer", "trainer-x")
    assert job.wait("trainer-x", 120) == 128 + signal.SIGTERM, job.log("trainer-x")
    log = job.log("trainer-x")
    assert "holding task" in log and "SIGTERM, task handed back" in log, log
    progress = job.wait_for(
        lambda p: p["tasks_total"] > 0 and not p["trainers"]["trainer-x"]["alive"], 30,
        "the master to see trainer-x leave",
    )  # fmt: skip
    assert progress["tasks_pending"] == 0, progress
    assert progress["tasks_todo"] == progress["tasks_total"], progress
    assert progress["tasks_failed"] == 0, progress
    assert "trainer trainer-x left" in job.log("master-0")
