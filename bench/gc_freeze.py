"""What freezing the startup heap saves a torch process (trainer, pserver), one run.

Once torch and edl are imported a Python process tracks ~180,000 container
objects that live until it exits. Every full (generation-2) collection walks them
all, and so does the interpreter's exit. `edl.runtime.heap.freeze_startup_heap`
moves them to the permanent generation. Measured here, each figure beside its
baseline in the same run (a fresh child process per sample):

* **full collection**: one `gc.collect()` after the imports, unfrozen vs frozen;
* **training pauses**: the collector's pauses over a training loop of small
  steps (an MLP on random data), unfrozen vs frozen: count and longest;
* **process cost**: wall time of a child that imports torch and the trainer API
  and exits, unfrozen vs frozen (what every trainer or pserver start pays).

Run: .venv/bin/python bench/gc_freeze.py [--samples N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from rich.console import Console
from rich.progress import track
from rich.table import Table

CHILD = """
import gc, json, sys, time
import torch
import edl.runtime.trainer
from edl.runtime.heap import freeze_startup_heap

tracked = len(gc.get_objects())
frozen = sys.argv[1] == "frozen"
if frozen:
    freeze_startup_heap()
start = time.perf_counter()
gc.collect()
full_ms = (time.perf_counter() - start) * 1e3

pauses = []
began = [0.0]
def watch(phase, info):
    if info["generation"] == 2:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            pauses.append((time.perf_counter() - began[0]) * 1e3)
gc.callbacks.append(watch)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer = torch.optim.Adam(model.parameters())
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
for _ in range(int(sys.argv[2])):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    junk = [{"step": i} for i in range(50)]  # what a loop's logging and metrics leave
print(json.dumps({"full_ms": full_ms, "pauses": pauses, "tracked": tracked}))
"""

EXIT_CHILD = """
import sys
import torch
import edl.runtime.trainer
from edl.runtime.heap import freeze_startup_heap
if sys.argv[1] == "frozen":
    freeze_startup_heap()
"""


def child(code: str, mode: str, *args: str) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, mode, *args], check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args()
    modes = ("unfrozen", "frozen")
    full: dict[str, list[float]] = {m: [] for m in modes}
    tracked: list[int] = []
    pauses: dict[str, list[list[float]]] = {m: [] for m in modes}
    wall: dict[str, list[float]] = {m: [] for m in modes}
    for _ in track(range(args.samples), description="samples (alternating modes)"):
        for mode in modes:
            _, out = child(CHILD, mode, str(args.steps))
            result = json.loads(out)
            full[mode].append(result["full_ms"])
            tracked.append(result["tracked"])
            pauses[mode].append(result["pauses"])
            wall[mode].append(child(EXIT_CHILD, mode)[0])
    table = Table(title=f"freezing the startup heap ({args.samples} samples each)")
    for column in ("figure", "unfrozen", "frozen", "frozen / unfrozen"):
        table.add_column(column)

    def row(name: str, values: dict[str, float], unit: str) -> None:
        ratio = values["frozen"] / values["unfrozen"] if values["unfrozen"] else float("nan")
        table.add_row(name, f"{values['unfrozen']:.1f} {unit}", f"{values['frozen']:.1f} {unit}",
                      f"{ratio:.2f}")  # fmt: skip

    row("full gc.collect() (median)", {m: statistics.median(full[m]) for m in modes}, "ms")
    row(f"gen-2 pauses in {args.steps} steps (median count)",
        {m: statistics.median(len(p) for p in pauses[m]) for m in modes}, "")  # fmt: skip
    row("longest gen-2 pause (median of runs)",
        {m: statistics.median(max(p, default=0.0) for p in pauses[m]) for m in modes}, "ms")
    row("import torch + trainer API, exit (median wall)",
        {m: statistics.median(wall[m]) * 1e3 for m in modes}, "ms")  # fmt: skip
    console = Console()
    objects = statistics.median(tracked)
    console.print(f"objects the collector tracks after the imports: median {objects:,.0f}")
    console.print(table)


if __name__ == "__main__":
    main()
