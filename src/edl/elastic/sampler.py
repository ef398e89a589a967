"""Which samples each worker trains on, step by step, whatever the world does (pure).

An epoch is one permutation of the dataset (seeded by the epoch: every worker, old or
new, computes the same one) and a cursor, ``consumed``: how many of its positions the
world has trained on. A step takes the next ``world x batch`` positions and gives
worker ``r`` its contiguous part; after the step every worker advances the cursor by
the whole step. The cursor is part of the replicated state, so when the world changes
between two steps the new world carries on from the same position with its own
partition: no sample of the epoch is skipped or trained twice.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Share", "epoch_order", "shares", "step_size"]


@dataclass(frozen=True, slots=True)
class Share:
    """Worker ``rank``'s part of one step: positions ``[start, stop)`` of the epoch's order."""

    rank: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


def epoch_order(size: int, epoch: int, seed: int = 0, shuffle: bool = True) -> list[int]:
    """The epoch's permutation of ``range(size)``: the same in every process."""
    order = list(range(size))
    if shuffle:
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def step_size(remaining: int, world: int, batch: int) -> int:
    """Positions the next step takes: ``world x batch``, or the whole tail when what
    would be left could not give every worker a sample (no worker idles on the last step
    unless the epoch has fewer samples left than workers)."""
    if remaining <= 0:
        return 0
    take = min(remaining, world * batch)
    if 0 < remaining - take < world:
        take = remaining
    return take


def shares(consumed: int, size: int, world: int, batch: int) -> list[Share]:
    """Every worker's part of the step starting at ``consumed``: contiguous, sizes
    differing by at most one, together exactly the step."""
    if world < 1 or batch < 1:
        raise ValueError(f"world and batch must be >= 1 (got {world}, {batch})")
    take = step_size(size - consumed, world, batch)
    base, extra = divmod(take, world)
    out, start = [], consumed
    for rank in range(world):
        stop = start + base + (1 if rank < extra else 0)
        out.append(Share(rank, start, stop))
        start = stop
    return out
