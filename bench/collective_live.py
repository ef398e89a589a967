"""Live resizing vs restarting: the pause per resize of a collective job, both ways.

The same digits DDP model, two scripts: `examples/digits-ddp` (a plain torchrun script:
every resize restarts every worker, which resumes from the last epoch's checkpoint) and
`examples/digits-ddp-live` (`edl.elastic`: the world re-forms inside the living
workers at a step boundary). In one run, on this machine, for each path:

* **pause per resize**: from the decision to the first step finished by the new world.
  Planned resizes: a running job (trainers of 500m on a virtual 2-core node, world
  sizes 1 and 2) is shrunk by a reservation and grown by its release, --resizes times
  each; the decision is the moment the trainer Job's parallelism changed (polled every
  50 ms). For a grow the new pod's start is excluded on the live path (it warms up
  before it joins: the pause counts from the moment it is ready, or from the decision
  if later); the restart path's figure includes every worker's start, which is its
  cost. SIGKILL: one of 2 workers killed, --kills times; pause from the kill to the
  first step of the re-formed world (live: without the dead worker, which rejoins
  later; restart: the restarted world of 2).
* **steps redone**: live, from the audit file (a step finished in one generation and
  started again by a later one); restart, the steps of the interrupted epoch done
  before the resize (its checkpoint is the previous epoch's).
* **throughput**: samples/s of 2 workers with no resize: plain torchrun running the
  plain script (the baseline), and `edl run` of the live example (the per-step
  membership check and the agent included); ratio to the baseline.

Medians; the machine's load average is printed with the figures (it is shared).

Run: .venv/bin/python bench/collective_live.py [--resizes 5] [--kills 5] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from collective import DDP, SAMPLES_PER_EPOCH, epoch_lines, run_torchrun, throughput, timed_script
from edl.elastic.audit import coverage, parse
from edl.local import procs
from edl.local.process_pods import RUN_MARKER_ENV
from edl.local.run import LocalRun, RunOptions

REPO = Path(__file__).resolve().parents[1]
LIVE = REPO / "examples" / "digits-ddp-live"
HALF_CORE = {"requests": {"cpu": "500m", "memory": "256Mi"},
             "limits": {"cpu": "1", "memory": "1Gi"}}
PAUSE_S = 0.04  # each step also sleeps: resizes land mid-epoch, on a loaded machine too
console = Console()
_READY = re.compile(r"waiting to join \(slot \d+\) time=([0-9.]+)")


# -- the scripts ----------------------------------------------------------------------
def restart_script(workdir: Path) -> Path:
    """The plain example, paced, saying when each process finished its first step and
    where rank 0 is (`rstep`), besides `time=`/`workers=` on its epoch line."""
    script = timed_script(workdir, pause_s=PAUSE_S)
    text = script.read_text()
    marker = f"            time.sleep({PAUSE_S})\n"
    assert marker in text
    text = text.replace(marker, marker + (
        "            if rank == 0:\n"
        "                print(f\"rstep epoch={epoch + 1} time={time.time():.3f}\", flush=True)\n"
        "            if not FIRST:\n"
        "                FIRST.append(1)\n"
        "                print(f\"first_step time={time.time():.3f} workers={world_size}\", "
        "flush=True)\n"))
    text = text.replace("def main():\n", "FIRST = []\n\n\ndef main():\n", 1)
    script.write_text(text)
    return script


def live_timed_script(workdir: Path) -> Path:
    """The live example with `time=` on its epoch line (for samples/s)."""
    text = (LIVE / "train.py").read_text()
    old = 'f"workers={loop.world}", flush=True)'
    assert old in text, "the live example's epoch line changed"
    text = text.replace(old, 'f"workers={loop.world} time={time.time():.3f}", flush=True)')
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "train.py").write_text(text)
    return workdir / "train.py"


# -- jobs -----------------------------------------------------------------------------
def job(name: str, workspace: Path, entrypoint: str, live: bool, **trainer: Any) -> dict:
    spec = yaml.safe_load(((LIVE if live else DDP) / "job.yaml").read_text())
    spec["metadata"]["name"] = name
    spec["spec"]["trainer"].update({"workspace": str(workspace), "entrypoint": entrypoint,
                                    **trainer})
    spec["spec"]["collective"] = {"world-sizes": [1, 2], "resize-cooldown": 0, "live": live}
    return spec


def logs(run: LocalRun, name: str) -> str:
    return "".join(p.read_text(errors="replace") for p in run.run_dir.glob(f"{name}-trainer-*.log"))


async def _until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _decision(run: LocalRun, size: int) -> float:
    assert run.cluster is not None
    await _until(lambda: run.cluster is not None
                 and run.cluster.trainer_counts(run.namespace, run.name).desired == size,
                 120, f"a resize to {size}")
    return time.time()


def workers_of(run: LocalRun) -> list[int]:
    return procs.script_pids(RUN_MARKER_ENV, str(run.run_dir), "train.py",
                             not_module="edl.runtime.collective.torchrun")


# -- the two paths: when did the new world take its first step? -----------------------
class LivePath:
    def __init__(self, audit: Path) -> None:
        self.audit = audit

    def lines(self) -> list[str]:
        return self.audit.read_text().splitlines() if self.audit.exists() else []

    def first_step(self, size: int, after: float) -> float | None:
        """The first step of the first generation of ``size`` formed after ``after``."""
        formed = [f for f in parse(self.lines())[1] if f.world == size and f.time > after]
        if not formed:
            return None
        gen = min(formed, key=lambda f: f.gen).gen
        for line in self.lines():
            found = re.search(rf"first-step gen={gen} time=([0-9.]+)", line)
            if found:
                return float(found.group(1))
        return None

    def world(self) -> int:
        formed = parse(self.lines())[1]
        return max(formed, key=lambda f: f.gen).world if formed else 0


class RestartPath:
    def __init__(self, run: LocalRun, name: str) -> None:
        self.run, self.name = run, name

    def first_step(self, size: int, after: float) -> float | None:
        times = [float(t) for t, w in re.findall(r"first_step time=([0-9.]+) workers=(\d+)",
                                                 logs(self.run, self.name))
                 if int(w) == size and float(t) > after]
        return min(times) if times else None

    def redone(self, decided: float) -> int:
        """Steps rank 0 did in the epoch the resize interrupted (lost with it)."""
        text = logs(self.run, self.name)
        done = {int(e["epoch"]) for e in epoch_lines(text) if e["time"] <= decided}
        steps = [(int(e), float(t)) for e, t in re.findall(r"rstep epoch=(\d+) time=([0-9.]+)",
                                                           text) if float(t) <= decided]
        current = max((e for e, _ in steps), default=-1)
        return 0 if current in done else sum(1 for e, _ in steps if e == current)


async def resizes(
    run: LocalRun, path: Any, count: int, live: bool, name: str
) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {"shrink": [], "grow": [], "grow incl. pod start": [],
                                     "redone": []}
    for _ in range(count):
        run.reserve("tenant", cpu="1200m")
        decided = await _decision(run, 1)
        await _until(lambda d=decided: path.first_step(1, d) is not None, 240, "a world of 1")
        found["shrink"].append(path.first_step(1, decided) - decided)
        if not live:
            found["redone"].append(path.redone(decided))
        run.release("tenant")
        decided = await _decision(run, 2)
        await _until(lambda d=decided: path.first_step(2, d) is not None, 240, "a world of 2")
        first = path.first_step(2, decided)
        ready = decided
        if live:
            readies = [float(t) for t in _READY.findall(logs(run, name)) if float(t) > decided]
            ready = max(decided, min(readies)) if readies else decided
        else:
            found["redone"].append(path.redone(decided))
        found["grow"].append(first - ready)
        found["grow incl. pod start"].append(first - decided)
        console.print(f"  {name}: shrink {found['shrink'][-1]:.2f} s, grow "
                      f"{found['grow'][-1]:.2f} s ({found['grow incl. pod start'][-1]:.1f} s "
                      "with the pod's start)")
    return found


async def kills(run: LocalRun, path: Any, count: int, live: bool, name: str) -> list[float]:
    pauses = []
    size = 1 if live else 2  # live: the survivor goes on alone; restart: all restart
    for _ in range(count):
        await _until(lambda: len(workers_of(run)) == 2 and (not live or path.world() == 2),
                     300, "2 workers")
        if live:
            await asyncio.sleep(1.0)  # a few steps in the world of 2
        victim = workers_of(run)[0]
        killed = time.time()
        os.kill(victim, signal.SIGKILL)
        await _until(lambda k=killed: path.first_step(size, k) is not None, 300, "a new world")
        pauses.append(path.first_step(size, killed) - killed)
        console.print(f"  {name}: SIGKILL -> first step {pauses[-1]:.2f} s")
    return pauses


async def measure(tmp: Path, live: bool, resize_count: int, kill_count: int) -> dict[str, Any]:
    name = "bench-live" if live else "bench-restart"
    if live:
        audit = tmp / f"{name}.audit"
        entry = f"python train.py --epochs 100000 --step-pause {PAUSE_S} --audit {audit}"
        workspace = LIVE
    else:
        script = restart_script(tmp / "restart")
        entry = "python train.py --epochs 100000 --checkpoint $(EDL_CHECKPOINT_DIR)/ddp.pt"
        workspace = script.parent
    spec = job(name, workspace, entry, live, resources=HALF_CORE,
               **{"min-instance": 1, "max-instance": 2})
    run = LocalRun(spec, RunOptions(runs_root=tmp / "runs", cpu="2", memory="8Gi",
                                    autoscale_interval_s=1.0, job_dir=workspace))
    path: Any = LivePath(audit) if live else RestartPath(run, name)
    out: dict[str, Any] = {}
    try:
        await run.start()
        waiter = asyncio.create_task(run.wait())
        await _until(lambda: len(workers_of(run)) == 2 and path.first_step(2, 0) is not None,
                     300, "2 workers at work")
        out = await resizes(run, path, resize_count, live, name)
        out["sigkill"] = await kills(run, path, kill_count, live, name)
        if live:
            trained, formed = parse(path.lines())
            epochs = max((r.epoch for r in trained), default=0) + 1
            out["redone"] = [coverage(trained, formed, SAMPLES_PER_EPOCH, epochs).redone_steps]
        run.stop("bench done")
        await waiter
    finally:
        await run.close()
    return out


async def live_throughput(tmp: Path, epochs: int) -> float:
    script = live_timed_script(tmp / "live-fast")
    spec = job("bench-live-tp", script.parent, f"python train.py --epochs {epochs}", True,
               **{"min-instance": 2, "max-instance": 2})
    run = LocalRun(spec, RunOptions(runs_root=tmp / "runs", job_dir=script.parent,
                                    timeout_s=900))
    result = None
    try:
        await run.start()
        result = await run.wait()
    finally:
        await run.close(result)
    if result is None or not result.ok:
        raise RuntimeError(f"edl run failed: {result}")
    return throughput(epoch_lines(logs(run, "bench-live-tp")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resizes", type=int, default=5)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="1 resize, 1 kill, 10 epochs")
    args = parser.parse_args()
    if args.quick:
        args.resizes, args.kills, args.epochs = 1, 1, 10
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="edl-bench-live-") as name:
        tmp = Path(name)
        live = asyncio.run(measure(tmp, True, args.resizes, args.kills))
        loads.append(os.getloadavg()[0])
        restart = asyncio.run(measure(tmp, False, args.resizes, args.kills))
        loads.append(os.getloadavg()[0])
        plain = run_torchrun(timed_script(tmp / "fast"), args.epochs, tmp)
        live_tp = asyncio.run(live_throughput(tmp, args.epochs))
        loads.append(os.getloadavg()[0])
    table = Table(title=f"collective resizes, live vs restart (2 gloo workers, digits; "
                        f"load average {min(loads):.0f}-{max(loads):.0f})")
    for column in ("figure", "live", "restart", "restart / live"):
        table.add_column(column, justify="right" if column != "figure" else "left")

    def median(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    for key, label in (("shrink", "shrink 2 -> 1: pause (s)"),
                       ("grow", "grow 1 -> 2: pause, pod start excluded (s)"),
                       ("grow incl. pod start", "grow 1 -> 2: decision -> first step (s)"),
                       ("sigkill", "SIGKILL a worker: kill -> first step (s)")):
        a, b = median(live.get(key, [])), median(restart.get(key, []))
        table.add_row(f"{label}, median of {len(live.get(key, []))}", f"{a:.2f}", f"{b:.2f}",
                      f"{b / a:.1f}x" if a > 0 else "-")
    table.add_row("steps redone, planned resizes (total)",
                  str(sum(live.get("redone", [0]))) + " (incl. kills)",
                  str(sum(restart.get("redone", []))), "")
    table.add_row("samples/s, 2 workers, no resize", f"{live_tp:.0f}", f"{plain:.0f} (torchrun)",
                  "")
    table.add_row("throughput ratio, live under edl / plain torchrun", f"{live_tp / plain:.3f}",
                  "", "")
    console.print(table)
    print(json.dumps({"live": live, "restart": restart, "live_samples_per_s": live_tp,
                      "torchrun_samples_per_s": plain, "load": loads}))


if __name__ == "__main__":
    main()
