"""A live world's batch changes at a step boundary, mid-epoch, without a restart (issue 32):
two real `edl.elastic` workers (gloo, a real store) with `AdaptiveBatch`; the batch the
Autoscaler publishes in a real etcd (`EtcdBatchSink`) reaches both at the same step, the
world is never re-formed, and every sample of every epoch is trained exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest

from edl.elastic.audit import coverage, parse

pytestmark = pytest.mark.timeout(300)

SIZE, EPOCHS, INITIAL, CHOSEN = 6000, 2, 32, 128  # epoch 0: 188 paced steps, >= 9 s

SCRIPT = textwrap.dedent('''
    import json, sys, time
    import torch
    from edl.elastic import Batch, ElasticLoop, State
    from edl.runtime.collective.adaptive import AdaptiveBatch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    size, epochs, initial, audit = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    x = torch.randn(size, 8)
    y = x @ torch.arange(8.0) + 0.1 * torch.randn(size)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    adaptive = AdaptiveBatch(None, optimizer, initial_batch=initial, poll_s=0.2)
    loop = ElasticLoop(State(model, optimizer), size, initial, epochs, audit=audit,
                       adaptive=adaptive)

    def train_step(batch: Batch) -> None:
        index = torch.tensor(batch.indices, dtype=torch.long)
        optimizer.zero_grad()
        loss = ((loop.ddp(x[index]).squeeze(1) - y[index]) ** 2).sum()
        (loss * batch.scale).backward()
        adaptive.step()
        if adaptive.batch == initial:  # paced until the chosen batch arrives
            time.sleep(0.05)

    loop.run(train_step)
    out = {"rank": loop.rank, "batch": adaptive.batch, "local": loop.local_batch,
           "gain": adaptive.gain, "lr": optimizer.param_groups[0]["lr"],
           "compute_rate": adaptive.metrics().get("compute_rate")}
    print("RESULT " + json.dumps(out), flush=True)
''')


def test_a_published_batch_reaches_every_live_worker_at_one_step_boundary_mid_epoch(
    tmp_path: Path, etcd: object
) -> None:
    from torch.distributed import TCPStore

    from edl.runtime.collective.batch import EtcdBatchSink

    endpoints = etcd.endpoints  # type: ignore[attr-defined]
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=30))
    script, audit = tmp_path / "live_batch.py", tmp_path / "audit.log"
    script.write_text(SCRIPT)
    base = {**os.environ, "OMP_NUM_THREADS": "1", "EDL_ETCD_ENDPOINTS": endpoints,
            "EDL_NAMESPACE": "team", "EDL_JOB_NAME": "live", "LOCAL_WORLD_SIZE": "1",
            "EDL_LIVE_STORE": f"127.0.0.1:{store.port}", "EDL_LIVE_PREFIX": "edl-live/team/live",
            "EDL_LIVE_MIN_WORLD": "2", "EDL_LIVE_MAX_WORLD": "2"}
    workers = [
        subprocess.Popen(
            [sys.executable, "-u", str(script), str(SIZE), str(EPOCHS), str(INITIAL), str(audit)],
            env={**base, "EDL_LIVE_IDENT": f"w{i}"}, cwd=tmp_path, text=True,
            stdout=subprocess.PIPE, stderr=open(tmp_path / f"w{i}.err", "w"),  # noqa: SIM115
        )
        for i in range(2)
    ]
    try:
        deadline = time.monotonic() + 200
        while not audit.exists() or audit.read_text().count(" trained ") < 20:  # mid-epoch 0
            assert time.monotonic() < deadline, "the workers never trained"
            assert all(w.poll() is None for w in workers), "a worker ended before the change"
            time.sleep(0.1)
        assert asyncio.run(EtcdBatchSink(lambda _ns, _job: endpoints).publish(
            "team", "live", CHOSEN)) is True
        outputs = [w.communicate(timeout=200)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    errors = "".join((tmp_path / f"w{i}.err").read_text()[-2000:] for i in range(2))
    assert [w.returncode for w in workers] == [0, 0], errors
    results = [json.loads(line.removeprefix("RESULT ")) for out in outputs
               for line in out.splitlines() if line.startswith("RESULT ")]
    assert [(r["batch"], r["local"]) for r in results] == [(CHOSEN, CHOSEN // 2)] * 2
    assert all(r["lr"] == pytest.approx(0.01 * r["gain"]) for r in results)
    # each world's DDP wrapper is measured: one trainer's computing rate is known
    assert all((r["compute_rate"] or 0) > 0 for r in results), results
    lines = audit.read_text().splitlines()
    trained, formed = parse(lines)
    assert [(f.gen, f.world) for f in formed] == [(0, 2)], "one world, never re-formed"
    changes = [line for line in lines if " batch gen=" in line]
    assert len(changes) == 1 and f"from={INITIAL} to={CHOSEN}" in changes[0], changes
    pairs = dict(pair.split("=") for pair in changes[0].split() if "=" in pair)
    assert 0 < int(pairs["consumed"]) < SIZE, "mid-epoch"
    switch = int(pairs["step"])  # the first step at the new batch, in both workers
    for record in trained:
        share = INITIAL // 2 if record.step < switch else CHOSEN // 2
        assert record.stop - record.start <= share, record  # an epoch's tail may be shorter
    full = {(r.step, r.stop - r.start) for r in trained if r.stop - r.start in
            (INITIAL // 2, CHOSEN // 2)}
    assert (switch - 1, INITIAL // 2) in full and (switch, CHOSEN // 2) in full
    seen = coverage(trained, formed, SIZE, EPOCHS)
    assert seen.exact and seen.redone_steps == 0, seen
