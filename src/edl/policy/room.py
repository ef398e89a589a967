"""Per-node room while a plan is made: what is free now and what is on its way.

`free` is each node's idle room (allocatable minus the pods bound to it) minus
what the plan has given out so far. `coming` is room held by trainers that are
already leaving (being deleted, or shed by this plan): a pod that waits for it
will fit once they exit, but nothing may be *grown* into it yet, or a node would
be over-committed while they drain. Plain lists (one per resource) because the
growth loop reads them element by element, which is much faster than numpy.
"""

from __future__ import annotations

from edl.accounting.types import Nodes

__all__ = ["Room", "Shape"]

Shape = tuple[int, int, int]  # CPU milli, memory mega, GPUs (requests of one pod)


class Room:
    """Free and coming room per node, with a first-fit cursor per pod shape."""

    __slots__ = ("coming", "count", "cursor", "dirty", "free", "index", "names")

    def __init__(self, nodes: Nodes) -> None:
        self.names = names = list(nodes.cpu_idle_milli)
        self.index = {name: i for i, name in enumerate(names)}
        self.count = len(names)
        self.free: list[list[int]] = [
            list(nodes.cpu_idle_milli.values()),
            [nodes.memory_free_mega.get(name, 0) for name in names],
            [nodes.gpu_free.get(name, 0) for name in names],
        ]
        self.coming: list[list[int]] = [[0] * self.count for _ in range(3)]
        # Free room only shrinks between two `give` calls, so a node too small for a
        # shape stays too small and each shape's cursor only moves forward.
        self.cursor: dict[Shape, int] = {}
        # nodes changed since a reader (the preemption search) last copied the room
        self.dirty: set[int] = set()

    def take(self, shape: Shape) -> int:
        """Take free room for one pod on the first node where it fits; its index, or -1."""
        cpu, memory, gpu = shape
        index = self.cursor.get(shape, 0)
        node_cpu, node_memory, node_gpu = self.free
        count = self.count
        while index < count:
            if node_cpu[index] >= cpu and node_memory[index] >= memory and node_gpu[index] >= gpu:
                node_cpu[index] -= cpu
                node_memory[index] -= memory
                node_gpu[index] -= gpu
                self.cursor[shape] = index
                self.dirty.add(index)
                return index
            index += 1
        self.cursor[shape] = count
        return -1

    def fits(self, node: int, shape: Shape, coming: bool) -> bool:
        """Whether `shape` fits on `node` in its free room (plus its coming room)."""
        free, later = self.free, self.coming
        return all(
            shape[d] <= free[d][node] + (later[d][node] if coming else 0) for d in range(3)
        )

    def take_at(self, node: int, shape: Shape) -> None:
        """Take room on `node` for a pod that may wait: free room first, then coming."""
        free, later = self.free, self.coming
        self.dirty.add(node)
        for d in range(3):
            free[d][node] -= shape[d]
            if free[d][node] < 0 < later[d][node]:
                moved = min(-free[d][node], later[d][node])
                free[d][node] += moved
                later[d][node] -= moved

    def give(self, node: int, shape: Shape) -> None:
        """Return free room taken by `take` (a planned trainer that is dropped again)."""
        for d in range(3):
            self.free[d][node] += shape[d]
        self.cursor.clear()
        self.dirty.add(node)

    def release(self, node: int, shape: Shape) -> None:
        """A pod on `node` is leaving: its room is coming, not free yet."""
        for d in range(3):
            self.coming[d][node] += shape[d]
        self.dirty.add(node)

    def column(self, node: int, coming: bool) -> Shape:
        free, later = self.free, self.coming
        if coming:
            return (
                free[0][node] + later[0][node],
                free[1][node] + later[1][node],
                free[2][node] + later[2][node],
            )
        return (free[0][node], free[1][node], free[2][node])
