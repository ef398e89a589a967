"""A torchrun job takes a newly published batch when its world next re-forms, and is never
restarted for the batch alone (issue 32): a restart stops every worker for 19-59 s.
A real `edl agent` (torch's elastic agent, the `edl` rendezvous on a real store) on a
real etcd; the re-forming here is a worker failure, which torch answers as a resize."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from polling import wait_until

pytestmark = pytest.mark.timeout(240)

# each round: its pid, torch's restart count and the batch rank 0 agreed; then a tick
# every 0.05 s until asked to fail (the first round only) or to finish
SCRIPT = textwrap.dedent('''
    import os, sys, time
    from pathlib import Path
    import torch
    import torch.distributed as dist
    from edl.runtime.collective.adaptive import AdaptiveBatch

    dist.init_process_group("gloo")
    out = Path(sys.argv[1])
    model = torch.nn.Linear(2, 1)
    adaptive = AdaptiveBatch(None, torch.optim.SGD(model.parameters(), lr=0.1), initial_batch=32)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
    with open(out / "rounds.log", "a") as log:
        log.write(f"{os.getpid()} {restart} {adaptive.batch}\\n")
    while not (out / "done").exists():
        if restart == 0 and (out / "fail").exists():
            raise RuntimeError("asked to fail once")
        with open(out / "ticks.log", "a") as log:
            log.write(f"{os.getpid()}\\n")
        time.sleep(0.05)
    dist.destroy_process_group()
''')
# ticks of the first round after the new batch is published: >= 6 s, more than the
# 3 s etcd poll and the agent's 1 s monitor that restarted a round for a batch
TICKS_AFTER = 120


def _rounds(out: Path) -> list[tuple[int, int, int]]:
    path = out / "rounds.log"
    text = path.read_text() if path.exists() else ""
    return [(int(a), int(b), int(c)) for a, b, c in (line.split() for line in text.splitlines())]


def _ticks(out: Path) -> list[str]:
    path = out / "ticks.log"
    return path.read_text().split() if path.exists() else []


def test_a_new_batch_waits_for_the_next_round_instead_of_restarting_one(
    tmp_path: Path, etcd: object
) -> None:
    from torch.distributed import TCPStore

    from edl.runtime.collective.batch import EtcdBatchSink

    endpoints = etcd.endpoints  # type: ignore[attr-defined]
    sink = EtcdBatchSink(lambda _ns, _job: endpoints)
    assert asyncio.run(sink.publish("team", "ddp", 64)) is True
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=60), multi_tenant=True)
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "EDL_ETCD_ENDPOINTS": endpoints,
           "EDL_NAMESPACE": "team", "EDL_JOB_NAME": "ddp", "EDL_POD_NAME": "ddp-trainer-0",
           "EDL_TRAINERS": "1", "EDL_TRAINERS_MAX": "1", "EDL_POD_IP": "127.0.0.1",
           "EDL_RDZV_ENDPOINT": f"127.0.0.1:{store.port}", "EDL_WORKSPACE": str(tmp_path),
           "EDL_ENTRYPOINT": f"python train.py {tmp_path}"}
    log = open(tmp_path / "agent.log", "w")  # noqa: SIM115
    agent = subprocess.Popen([sys.executable, "-m", "edl.cli.main", "agent"], env=env,
                             cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        first = wait_until(lambda: _rounds(tmp_path), 120, "the first round")
        assert [(r, b) for _, r, b in first] == [(0, 64)]
        assert asyncio.run(sink.publish("team", "ddp", 96)) is True
        published_at = len(_ticks(tmp_path))
        wait_until(lambda: len(_ticks(tmp_path)) >= published_at + TICKS_AFTER, 120,
                   "the first round training on")
        assert _rounds(tmp_path) == first, "a round was restarted for the batch alone"
        assert set(_ticks(tmp_path)) == {str(first[0][0])}
        (tmp_path / "fail").touch()  # a failure re-forms the world: it takes the new batch
        rounds = wait_until(lambda: _rounds(tmp_path)[1:], 120, "the next round")
        assert [(r, b) for _, r, b in rounds] == [(1, 96)]
        assert rounds[0][0] != first[0][0]
        (tmp_path / "done").touch()
        assert agent.wait(timeout=60) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        log.close()
        del store
    assert "asked to fail once" in (tmp_path / "agent.log").read_text()
