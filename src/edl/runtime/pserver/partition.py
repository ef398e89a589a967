"""Deterministic, size-balanced assignment of parameter blocks to pservers.

Large tensors are cut into flat blocks of at most `block_size` elements, then
blocks are placed largest-first on the least-loaded pserver (ties: lowest
index). Every trainer computes the same plan from the same model, so no
coordination is needed to agree on who holds what.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BLOCK_SIZE = 1 << 18  # 262,144 elements = 1 MiB of float32


@dataclass(frozen=True)
class Block:
    """Elements [start, stop) of the flattened parameter `param`."""

    param: str
    start: int
    stop: int

    @property
    def id(self) -> str:
        return f"{self.param}#{self.start}"

    @property
    def size(self) -> int:
        return self.stop - self.start


def split_blocks(
    params: list[tuple[str, int]], block_size: int = DEFAULT_BLOCK_SIZE
) -> list[Block]:
    """Cut each (name, numel) into blocks of nearly equal size, none above block_size."""
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    blocks: list[Block] = []
    for name, numel in params:
        if numel <= 0:
            continue
        pieces = -(-numel // block_size)
        base, extra = divmod(numel, pieces)
        start = 0
        for i in range(pieces):
            stop = start + base + (1 if i < extra else 0)
            blocks.append(Block(name, start, stop))
            start = stop
    return blocks


def partition(
    params: list[tuple[str, int]], num_pservers: int, block_size: int = DEFAULT_BLOCK_SIZE
) -> list[list[Block]]:
    """Blocks per pserver index: greedy largest-first onto the lightest shard."""
    if num_pservers <= 0:
        raise ValueError("num_pservers must be positive")
    shards: list[list[Block]] = [[] for _ in range(num_pservers)]
    loads = [0] * num_pservers
    for block in sorted(
        split_blocks(params, block_size), key=lambda b: (-b.size, b.param, b.start)
    ):
        target = min(range(num_pservers), key=lambda i: (loads[i], i))
        shards[target].append(block)
        loads[target] += block.size
    for shard in shards:
        shard.sort(key=lambda b: (b.param, b.start))
    return shards
