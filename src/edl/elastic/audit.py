"""Reading back what a live world trained on, from its workers' output (pure).

With ``audit=<file>`` every worker appends one line per step as it starts it
(``trained gen= step= epoch= rank= world= from= to=``: its positions of the epoch's
order) and rank 0 one line per generation formed (``formed gen= step= ...``: the step
the new world starts from) to one shared file. A step finished in one generation
and started again by a later one (a rollback after a lost worker) was *redone*; the
other records must cover every epoch's positions exactly once. Tests and the bench
check both from the lines of every process, the dead ones' included.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Coverage", "Formed", "Trained", "coverage", "parse"]

_PAIRS = re.compile(r"(\w+)=([-0-9.]+)")


@dataclass(frozen=True)
class Trained:
    gen: int
    step: int
    epoch: int
    rank: int
    world: int
    start: int
    stop: int


@dataclass(frozen=True)
class Formed:
    gen: int
    step: int
    world: int
    time: float


@dataclass(frozen=True)
class Coverage:
    """Per epoch, positions never trained and positions trained more than once; and
    the number of steps finished and then redone after a rollback."""

    missing: dict[int, list[int]]
    doubled: dict[int, list[int]]
    redone_steps: int

    @property
    def exact(self) -> bool:
        return not self.missing and not self.doubled


def parse(lines: Iterable[str]) -> tuple[list[Trained], list[Formed]]:
    trained, formed = [], []
    for line in lines:
        if "edl-elastic" not in line:
            continue
        pairs = {k: v for k, v in _PAIRS.findall(line)}
        if " trained " in line:
            trained.append(Trained(int(pairs["gen"]), int(pairs["step"]), int(pairs["epoch"]),
                                   int(pairs["rank"]), int(pairs["world"]),
                                   int(pairs["from"]), int(pairs["to"])))
        elif " formed " in line:
            formed.append(Formed(int(pairs["gen"]), int(pairs["step"]), int(pairs["world"]),
                                 float(pairs["time"])))
    return trained, formed


def coverage(trained: list[Trained], formed: list[Formed], size: int, epochs: int) -> Coverage:
    """What the surviving world trained on: records not undone by a later generation."""
    starts = sorted((f.gen, f.step) for f in formed)

    def undone(record: Trained) -> bool:
        return any(gen > record.gen and step <= record.step for gen, step in starts)

    kept = [r for r in trained if not undone(r)]
    reached: dict[int, int] = {}  # per generation, the last step any worker started
    for r in trained:
        reached[r.gen] = max(r.step, reached.get(r.gen, r.step))
    # redone: finished in its generation (a later step started there), then undone
    redone = {(r.gen, r.step) for r in trained if undone(r) and reached[r.gen] > r.step}
    counts = {epoch: [0] * size for epoch in range(epochs)}
    for record in kept:
        row = counts.setdefault(record.epoch, [0] * size)
        for position in range(record.start, record.stop):
            row[position] += 1
    missing = {e: [i for i, c in enumerate(row) if c == 0] for e, row in counts.items()}
    doubled = {e: [i for i, c in enumerate(row) if c > 1] for e, row in counts.items()}
    return Coverage({e: v for e, v in missing.items() if v},
                    {e: v for e, v in doubled.items() if v}, len(redone))
