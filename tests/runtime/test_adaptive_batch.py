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
    import json, os, sys
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


def test_the_batch_comes_from_the_environment_and_is_checked() -> None:
    from edl.runtime.collective.adaptive import _batch_from

    assert _batch_from({"EDL_BATCH_SIZE": "256"}) == 256
    assert _batch_from({}) is None
    for bad in ("x", "0"):
        with pytest.raises(ValueError, match="EDL_BATCH_SIZE"):
            _batch_from({"EDL_BATCH_SIZE": bad})
