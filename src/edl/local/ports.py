"""Free loopback ports for pods, never handed out twice in one run.

Every pod on this machine shares one network namespace, so each container gets
its own block of consecutive ports (EDL_PORT .. EDL_PORT+n-1). A block is
probed free by binding each port, and remembered until released, so two pods
started in quick succession cannot receive the same port before either binds.
"""

from __future__ import annotations

import random

from edl.procs import port_is_free

# Below Linux's default ephemeral range (32768-60999): a port the kernel gave an
# outgoing connection or an etcd picked with bind(0) cannot be handed to a pod.
FIRST_PORT = 20000
LAST_PORT = 32000


class PortAllocator:
    """Hands out blocks of free consecutive ports, starting at a moving cursor."""

    def __init__(
        self, first: int = FIRST_PORT, last: int = LAST_PORT, start: int | None = None
    ) -> None:
        self._first = first
        self._last = last
        # A random start keeps concurrent runs on this machine from probing the same
        # ports at the same moment (a probe only proves a port free until a pod binds).
        self._cursor = start if start is not None else random.randrange(first, last)
        self._taken: set[int] = set()

    def allocate(self, count: int = 1) -> int:
        """The first port of a block of `count` free ports; raises if the range is exhausted."""
        span = self._last - self._first
        for _ in range(span):
            start = self._cursor
            self._cursor = self._first + (self._cursor + 1 - self._first) % span
            block = range(start, start + count)
            if block.stop > self._last:
                continue
            if any(p in self._taken for p in block):
                continue
            if all(port_is_free(p) for p in block):
                self._taken.update(block)
                self._cursor = self._first + (block.stop - self._first) % span
                return start
        raise RuntimeError(f"no block of {count} free ports in {self._first}-{self._last}")

    def release(self, start: int, count: int = 1) -> None:
        """Return a block so later pods may reuse it."""
        self._taken.difference_update(range(start, start + count))
