"""Collective jobs: the DDP example under edl vs under plain torchrun, and resize latency.

* **throughput**: `examples/digits-ddp/train.py` with 2 gloo workers, samples/s over
  the epochs after the first, under plain `torchrun --standalone --nproc-per-node=2`
  (the baseline, measured in the same run) and under `edl run` (2 trainer pods, one
  agent each, the master's rendezvous store, etcd, the control plane). Alternated,
  best of --rounds for each. Target: edl >= 0.95 of torchrun.
* **resize -> training resumed**: a running job (trainers of 500m on a virtual 2-core
  node, world sizes 1 and 2) is shrunk by a reservation and grown by its release,
  --resizes times each; measured from the Autoscaler's decision (the trainer Job's
  parallelism changed) to the first epoch finished by the new world. Median.

Both use a copy of the example that adds the wall time and the world size to its
epoch line (a metric line: `... time=<s> workers=<n>`), so no figure depends on
how often anything polls.

Alternated back to back, so the two see about the same machine; the table gives the
ratio of the bests and the median ratio of the pairs (the machine's load, printed
with the raw figures, moves both a lot on a shared 2-core box).

Run: .venv/bin/python bench/collective.py [--rounds 4] [--resizes 5] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from edl.local.run import LocalRun, RunOptions

REPO = Path(__file__).resolve().parents[1]
DDP = REPO / "examples" / "digits-ddp"
SAMPLES_PER_EPOCH = 1437  # digits: 80 % of 1797 images
console = Console()

TIMED_LINE = '                  f"accuracy={accuracy:.4f}", flush=True)\n'


def timed_script(workdir: Path, pause_s: float = 0.0) -> Path:
    """The example with `time=` and `workers=` on its epoch line (and an optional pause)."""
    text = (DDP / "train.py").read_text()
    assert TIMED_LINE in text, "the example's epoch line changed"
    text = text.replace(
        TIMED_LINE,
        '                  f"accuracy={accuracy:.4f} time={time.time():.3f} '
        'workers={world_size}", flush=True)\n',
    ).replace("import torch\n", "import time\n\nimport torch\n", 1)
    if pause_s:
        text = text.replace(
            "            optimizer.step()\n",
            f"            optimizer.step()\n            time.sleep({pause_s})\n",
        )
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "train.py"
    script.write_text(text)
    return script


def epoch_lines(text: str) -> list[dict[str, float]]:
    out = []
    for line in text.splitlines():
        if line.startswith("epoch=") and " time=" in line:
            out.append({k: float(v) for k, v in (p.split("=") for p in line.split())})
    return out


def throughput(lines: list[dict[str, float]]) -> float:
    """Samples/s from the end of the first epoch to the end of the last."""
    lines = sorted(lines, key=lambda x: x["time"])
    first, last = lines[0], lines[-1]
    return SAMPLES_PER_EPOCH * (last["epoch"] - first["epoch"]) / (last["time"] - first["time"])


def run_torchrun(script: Path, epochs: int, tmp: Path) -> float:
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(script), "--epochs", str(epochs), "--checkpoint", str(tmp / "plain.pt")],
        capture_output=True, text=True, timeout=900, cwd=tmp,
    )
    if done.returncode != 0:
        raise RuntimeError(f"torchrun failed: {done.stderr[-2000:]}")
    (tmp / "plain.pt").unlink(missing_ok=True)
    return throughput(epoch_lines(done.stdout))


def job_for(script: Path, name: str, epochs: int, **trainer: Any) -> dict[str, Any]:
    job = yaml.safe_load((DDP / "job.yaml").read_text())
    job["metadata"]["name"] = name
    spec = job["spec"]["trainer"]
    spec["workspace"] = str(script.parent)
    spec["entrypoint"] = spec["entrypoint"].replace("--epochs 20", f"--epochs {epochs}")
    spec.update(trainer)
    return job


async def run_edl(script: Path, epochs: int, tmp: Path) -> float:
    job = job_for(script, "bench-ddp", epochs, **{"min-instance": 2, "max-instance": 2})
    run = LocalRun(job, RunOptions(runs_root=tmp / "runs", job_dir=DDP, timeout_s=900))
    result = None
    try:
        await run.start()
        result = await run.wait()
    finally:
        await run.close(result)
    if not result.ok:
        raise RuntimeError(f"edl run failed: {result.message}")
    logs = "".join(p.read_text() for p in run.run_dir.glob("bench-ddp-trainer-*.log"))
    return throughput(epoch_lines(logs))


async def resize_latencies(script: Path, resizes: int, tmp: Path) -> dict[str, list[float]]:
    job = job_for(script, "bench-resize", 100_000, resources={
        "requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}})
    job["spec"]["trainer"]["max-instance"] = 2
    job["spec"]["collective"] = {"world-sizes": [1, 2], "resize-cooldown": 0}
    options = RunOptions(runs_root=tmp / "runs", cpu="2", memory="8Gi",
                         autoscale_interval_s=1.0, job_dir=DDP)
    run = LocalRun(job, options)
    found: dict[str, list[float]] = {"shrink 2 -> 1": [], "grow 1 -> 2": []}
    try:
        await run.start()
        waiter = asyncio.create_task(run.wait())
        await _until(lambda: run.snapshot.world_size == 2 and (run.snapshot.epoch or 0) >= 1, 300)
        for _ in range(resizes):
            for what, act, size in (("shrink 2 -> 1", "reserve", 1), ("grow 1 -> 2", "release", 2)):
                if act == "reserve":
                    run.reserve("tenant", cpu="1200m")
                else:
                    run.release("tenant")
                decided = await _parallelism_change(run, size)
                resumed = await _first_epoch_of(run, size, decided)
                found[what].append(resumed - decided)
                console.print(f"  {what}: {resumed - decided:.1f} s")
        run.stop("bench done")
        await waiter
    finally:
        await run.close()
    return found


async def _until(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the job did not get there in time")
        await asyncio.sleep(0.05)


async def _parallelism_change(run: LocalRun, size: int) -> float:
    """Wall time at which the trainer Job's parallelism became `size` (polled every 50 ms)."""
    assert run.cluster is not None
    deadline = time.monotonic() + 120
    while run.cluster.trainer_counts(run.namespace, run.name).desired != size:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no resize to {size}")
        await asyncio.sleep(0.05)
    return time.time()


async def _first_epoch_of(run: LocalRun, size: int, after: float) -> float:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        logs = "".join(p.read_text() for p in run.run_dir.glob("bench-resize-trainer-*.log"))
        times = [x["time"] for x in epoch_lines(logs)
                 if x["time"] > after and x["workers"] == size]
        if times:
            return min(times)
        await asyncio.sleep(0.5)
    raise TimeoutError(f"no epoch with {size} workers")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--resizes", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 round, 20 epochs, 1 resize")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.epochs, args.resizes = 1, 20, 1
    with tempfile.TemporaryDirectory(prefix="edl-bench-collective-") as name:
        tmp = Path(name)
        fast = timed_script(tmp / "fast")
        plain, edl = [], []
        for round_ in range(args.rounds):
            plain.append(run_torchrun(fast, args.epochs, tmp))
            edl.append(asyncio.run(run_edl(fast, args.epochs, tmp)))
            console.print(f"round {round_ + 1}: torchrun {plain[-1]:.0f}, edl {edl[-1]:.0f} "
                          "samples/s")
        latencies: dict[str, list[float]] = {}
        if args.resizes:
            paced = timed_script(tmp / "paced", pause_s=0.04)
            latencies = asyncio.run(resize_latencies(paced, args.resizes, tmp))
    table = Table(title="collective jobs (2 gloo workers, digits DDP example)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    ratio = max(edl) / max(plain) if plain else None
    paired = statistics.median(e / p for e, p in zip(edl, plain, strict=True)) if plain else None
    if plain:
        table.add_row("plain torchrun samples/s (best)", f"{max(plain):.0f}")
        table.add_row("edl run samples/s (best)", f"{max(edl):.0f}")
        table.add_row("ratio of the bests (target >= 0.95)", f"{ratio:.3f}")
        table.add_row(f"median ratio of {len(plain)} back-to-back pairs", f"{paired:.3f}")
    for what, values in latencies.items():
        table.add_row(f"{what}: decision -> epoch done, median of {len(values)} (s)",
                      f"{statistics.median(values):.1f}")
    console.print(table)
    print(json.dumps({"torchrun": plain, "edl": edl, "ratio": ratio, "paired": paired,
                      "resize_s": latencies, "load": os.getloadavg()}))


if __name__ == "__main__":
    main()
