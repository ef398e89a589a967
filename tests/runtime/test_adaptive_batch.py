"""The collective batch-adaptation helper on real DDP (gloo): φ recovered from gradients
of known variance, one worker or two (issue 22)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent('''
    import gc, json, os, sys
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from edl.runtime.collective.adaptive import AdaptiveBatch
    from edl.throughput.efficiency import NoiseScaleEstimator

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dim, phi, batch = 256, float(sys.argv[1]), int(sys.argv[2])
    gen = torch.Generator().manual_seed(1234)
    grad = torch.randn(dim, generator=gen, dtype=torch.float64)
    grad /= grad.norm()                      # |G|^2 = 1
    sigma = (phi / dim) ** 0.5               # tr(Sigma) = phi: phi = tr(Sigma)/|G|^2
    model = torch.nn.Linear(dim, 1, bias=False).double()
    ddp = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    adaptive = AdaptiveBatch(ddp, optimizer, initial_batch=batch, batch=batch)
    adaptive.estimator = NoiseScaleEstimator(smoothing=0.99999)  # phi is fixed: average all
    noise = torch.Generator().manual_seed(99 + rank)
    local = adaptive.local_batch_size()
    for _ in range(int(sys.argv[3])):
        # per-sample gradient of output.mean() w.r.t. the weight is the sample itself
        x = grad + sigma * torch.randn(local, dim, generator=noise, dtype=torch.float64)
        optimizer.zero_grad()
        ddp(x).mean().backward()
        adaptive.step()
    if rank == 0:
        print("RESULT " + json.dumps(adaptive.metrics()), flush=True)
    dist.barrier()  # every rank is done with the group before one tears it down
    del adaptive, ddp  # DDP holds the group: free it before interpreter exit,
    gc.collect()  # and DDP is in a reference cycle of its own: del alone frees nothing
    dist.destroy_process_group()
''')


@pytest.mark.parametrize("workers", [1, 2])
def test_ddp_hook_recovers_a_known_noise_scale(tmp_path: Path, workers: int) -> None:
    script = tmp_path / "known_noise.py"
    script.write_text(SCRIPT)
    phi, batch = 256.0, 128
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc-per-node={workers}", str(script), str(phi), str(batch), "2500"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    metrics = json.loads(line.removeprefix("RESULT "))
    assert metrics["batch"] == batch
    assert metrics["noise_scale"] == pytest.approx(phi, rel=0.10)
    assert 0 < metrics["efficiency"] <= 1.0 and metrics["gain"] == pytest.approx(1.0)
    # one trainer's computing rate (forward to the last gradient bucket): at least the
    # rate the whole world trained at per worker, as the steps also wait and step
    assert metrics["compute_rate"] >= metrics["samples_per_s"] / workers > 0


def test_the_batch_comes_from_the_environment_and_is_checked() -> None:
    from edl.runtime.collective.adaptive import _batch_from

    assert _batch_from({"EDL_BATCH_SIZE": "256"}) == 256
    assert _batch_from({}) is None
    for bad in ("x", "0"):
        with pytest.raises(ValueError, match="EDL_BATCH_SIZE"):
            _batch_from({"EDL_BATCH_SIZE": bad})


AGREE = textwrap.dedent('''
    import gc, json, os, sys
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from edl.runtime.collective.adaptive import AdaptiveBatch

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    # each rank sees a different environment: rank 1 a stale EDL_BATCH_SIZE and no etcd
    env = dict(os.environ) if rank == 0 else {"EDL_BATCH_SIZE": "48"}
    model = torch.nn.Linear(4, 1)
    adaptive = AdaptiveBatch(DDP(model), torch.optim.SGD(model.parameters(), lr=0.1),
                             initial_batch=32, env=env)
    with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as out:  # one file each:
        json.dump([rank, adaptive.batch, adaptive.local_batch_size()], out)  # no interleaving
    dist.barrier()  # every rank is done with the group before one tears it down
    del adaptive  # DDP holds the group: free it before interpreter exit,
    gc.collect()  # and DDP is in a reference cycle of its own: del alone frees nothing
    dist.destroy_process_group()
''')


def test_a_round_runs_the_batch_published_in_etcd_and_every_worker_agrees(
    tmp_path: Path, etcd: object
) -> None:
    """The Autoscaler's batch (`EtcdBatchSink`, real etcd) reaches a new round through
    rank 0, which broadcasts it: every worker of the round runs the same batch."""
    import asyncio

    from edl.runtime.collective.batch import EtcdBatchSink, read_batch

    endpoints = etcd.endpoints  # type: ignore[attr-defined]
    sink = EtcdBatchSink(lambda _ns, _job: endpoints)
    assert asyncio.run(sink.publish("team", "digits", 96)) is True
    assert read_batch(endpoints, "team", "digits") == 96
    script = tmp_path / "agree.py"
    script.write_text(AGREE)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "EDL_ETCD_ENDPOINTS": endpoints,
           "EDL_NAMESPACE": "team", "EDL_JOB_NAME": "digits", "EDL_BATCH_SIZE": "64"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(script), str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = sorted(json.loads(p.read_text()) for p in tmp_path.glob("rank*.json"))
    assert seen == [[0, 96, 48], [1, 96, 48]]


def test_no_published_batch_leaves_the_environment_s_and_a_dead_etcd_is_no_error() -> None:
    from edl.runtime.collective.adaptive import _given_batch

    env = {"EDL_ETCD_ENDPOINTS": "http://127.0.0.1:9", "EDL_JOB_NAME": "x",
           "EDL_BATCH_SIZE": "64"}
    assert _given_batch(env) == 64
    assert _given_batch({"EDL_JOB_NAME": "x"}) is None


ADAM = textwrap.dedent('''
    import gc, json, math, sys
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from edl.runtime.collective.adaptive import AdaptiveBatch
    from edl.throughput.efficiency import NoiseScaleEstimator

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dim, batch, steps = 256, int(sys.argv[1]), int(sys.argv[2])
    gen = torch.Generator().manual_seed(4321)
    # signal and per-sample noise of very different sizes per coordinate: the noise
    # Adam's steps see, g / (sqrt(v) + eps), has another scale than the plain gradient's
    grad = torch.randn(dim, generator=gen, dtype=torch.float64)
    grad *= torch.exp(torch.empty(dim, dtype=torch.float64).uniform_(-1.5, 1.5, generator=gen))
    grad /= grad.norm()
    sigma = 0.08 * torch.exp(torch.empty(dim, dtype=torch.float64).uniform_(-1.5, 1.5,
                                                                             generator=gen))
    model = torch.nn.Linear(dim, 1, bias=False).double()
    ddp = DDP(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0)
    adaptive = AdaptiveBatch(ddp, optimizer, initial_batch=batch, batch=batch)
    adaptive.estimator = NoiseScaleEstimator(smoothing=0.99999)  # phi is fixed: average all
    noise = torch.Generator().manual_seed(77 + rank)
    local = adaptive.local_batch_size()
    for _ in range(steps):
        x = grad + sigma * torch.randn(local, dim, generator=noise, dtype=torch.float64)
        optimizer.zero_grad()
        ddp(x).mean().backward()
        adaptive.step()
    state = optimizer.state[model.weight]
    step = float(state["step"])
    p = (state["exp_avg_sq"].reshape(-1) / (1 - 0.999 ** step)).sqrt() + 1e-8
    expected = float((sigma**2 / p**2).sum() / (grad**2 / p**2).sum())
    plain = float((sigma**2).sum() / (grad**2).sum())
    if rank == 0:
        print("RESULT " + json.dumps({**adaptive.metrics(), "expected": expected,
                                      "plain": plain, "adaptive": adaptive.adaptive}),
              flush=True)
    dist.barrier()  # every rank is done with the group before one tears it down
    del adaptive, ddp  # DDP holds the group: free it before interpreter exit,
    gc.collect()  # and DDP is in a reference cycle of its own: del alone frees nothing
    dist.destroy_process_group()
''')


@pytest.mark.parametrize("workers", [1, 2])
def test_ddp_hook_measures_adam_through_its_preconditioner(tmp_path: Path, workers: int) -> None:
    """AdaptDL PR #95: with Adam the hook measures φ of the preconditioned gradient; on
    gradients whose signal and noise differ per coordinate that is not the plain φ."""
    script = tmp_path / "adam_noise.py"
    script.write_text(ADAM)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc-per-node={workers}", str(script), "32", "2500"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert result["adaptive"] is True
    assert abs(result["plain"] - result["expected"]) / result["expected"] > 0.25
    assert result["noise_scale"] == pytest.approx(result["expected"], rel=0.10)


def test_a_non_finite_step_is_neither_measured_nor_applied() -> None:
    """AdaptDL PR #75: one worker; a NaN gradient skips the optimizer and the estimator."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from edl.procs import free_port
    from edl.runtime.collective.adaptive import AdaptiveBatch

    store = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        model = torch.nn.Linear(4, 1, bias=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ddp = DDP(model)
        adaptive = AdaptiveBatch(ddp, optimizer, initial_batch=8, batch=8)
        before = model.weight.detach().clone()
        ddp(torch.full((2, 4), float("nan"))).sum().backward()
        adaptive.step()
        assert adaptive.skipped_steps == 1
        assert torch.equal(model.weight.detach(), before)
        optimizer.zero_grad()
        ddp(torch.ones(2, 4)).sum().backward()
        adaptive.step()
        assert adaptive.skipped_steps == 1 and not torch.equal(model.weight.detach(), before)
    finally:
        dist.destroy_process_group()
