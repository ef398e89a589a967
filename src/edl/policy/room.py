"""Per-node room while a plan is made: what is free now and what is on its way.

`free` is each node's idle room (allocatable minus the pods bound to it) minus
what the plan has given out so far. `coming` is room held by trainers that are
already leaving (being deleted, or shed by this plan): a pod that waits for it
will fit once they exit, but nothing may be *grown* into it yet, or a node would
be over-committed while they drain. Plain lists (one per resource) because the
growth loop reads them element by element, which is much faster than numpy.

Resources: CPU milli, memory mega and GPUs always, then one dimension per other
resource some pod of the plan asks for (`extra`: `pods`, extended resources such as
`amd.com/gpu`, ephemeral-storage), so a node full of pods or out of an extended
resource offers no room. Which nodes a pod may use at all (taints, nodeSelector,
required node affinity) is an `Eligible` mask per distinct set of constraints.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from edl.accounting.eligibility import FILTERED_EFFECTS, NO_CONSTRAINTS, NodeFacts, PodConstraints
from edl.accounting.types import Nodes, PodResources

__all__ = ["Eligible", "Room", "Shape", "extra_dimensions"]

Shape = tuple[int, ...]  # CPU milli, memory mega, GPUs, then Room.extra (requests of one pod)
UNLIMITED = 1 << 40  # a node that does not say how many pods it takes


class Eligible:
    """The nodes pods with one set of constraints may land on (a mask over the room)."""

    __slots__ = ("array", "constraints", "count", "flags", "indices", "key")

    def __init__(
        self, key: int, constraints: PodConstraints, flags: list[bool] | np.ndarray
    ) -> None:
        self.key = key
        self.constraints = constraints
        self.set(flags)

    def set(self, flags: list[bool] | np.ndarray) -> None:
        """Make the mask `flags` (a mask changed in place keeps its key)."""
        self.array = np.array(flags, dtype=bool)
        self.flags: list[bool] = self.array.tolist()
        # the allowed nodes in order: first-fit scans visit these, not every node
        self.indices: list[int] = np.flatnonzero(self.array).tolist()
        self.count = len(self.indices)


_UNSET = object()
_MAX_VERDICTS = 4096  # distinct sets of constraints kept per node set


class _Verdicts:
    """Per set of constraints, which nodes pass the filters, for one set of nodes and
    their facts: kept across plans while those stay the same (the filters read
    nothing else), so a tick with unchanged nodes judges no node again."""

    __slots__ = ("_first", "_of_node", "facts", "facts_by_name", "masks", "names")

    def __init__(self, names: list[str], facts_by_name: Mapping[str, NodeFacts]) -> None:
        self.names = list(names)
        self.facts = [facts_by_name.get(name) or NodeFacts(name) for name in names]
        self.facts_by_name = dict(facts_by_name)
        self.masks: dict[PodConstraints, np.ndarray] = {}
        self._first: list[int] | None = None
        self._of_node = np.zeros(0, dtype=np.int64)

    def same(self, names: list[str], facts_by_name: Mapping[str, NodeFacts]) -> bool:
        """Whether these are the nodes and facts judged here (identical objects compare
        in C without calling __eq__: fast when the caller's snapshot shares them)."""
        return self.names == names and self.facts_by_name == facts_by_name

    def mask(self, constraints: PodConstraints) -> np.ndarray:
        """Per node, whether a pod with these constraints may land there (read-only)."""
        array = self.masks.get(constraints)
        if array is None:
            if constraints.per_node:
                array = np.array([not constraints.blocker(f) for f in self.facts], dtype=bool)
            else:  # one answer per group of alike nodes, spread over the nodes by numpy
                first, of_node = self._groups()
                ok = np.array([not constraints.blocker(self.facts[i]) for i in first],
                              dtype=bool)
                array = ok[of_node] if len(self.facts) else np.zeros(0, dtype=bool)
            array.flags.writeable = False
            if len(self.masks) >= _MAX_VERDICTS:
                self.masks.clear()
            self.masks[constraints] = array
        return array

    def _groups(self) -> tuple[list[int], np.ndarray]:
        """A node of each group of alike nodes (`NodeFacts.group`), and each node's group."""
        if self._first is None:
            groups: dict[object, int] = {}
            of_node = [groups.setdefault(facts.group, len(groups)) for facts in self.facts]
            first = [0] * len(groups)
            for i in reversed(range(len(of_node))):
                first[of_node[i]] = i
            self._first, self._of_node = first, np.array(of_node, dtype=np.int64)
        return self._first, self._of_node


_last_verdicts: list[_Verdicts] = []  # the one kept for the next plan


def _verdicts(names: list[str], facts_by_name: Mapping[str, NodeFacts]) -> _Verdicts:
    """The verdicts of the last plan when its nodes are these, else fresh ones."""
    last = _last_verdicts[0] if _last_verdicts else None
    if last is None or not last.same(names, facts_by_name):
        last = _Verdicts(names, facts_by_name)
        _last_verdicts[:] = [last]
    return last


def extra_dimensions(nodes: Nodes, asked: Iterable[tuple[tuple[str, int], ...]]) -> list[str]:
    """The resources beyond CPU/memory/GPU a plan must count: `pods` when nodes say how
    many they take, and every other resource some pod asks for."""
    names = {name for extended in asked for name, amount in extended if amount > 0}
    if any("pods" in free for free in nodes.extended_free.values()):
        names.add("pods")
    return sorted(names)


class Room:
    """Free and coming room per node, with a first-fit cursor per pod shape."""

    __slots__ = (
        "_eligible",
        "_facts_by_name",
        "_shapes",
        "_tainted",
        "_verdicts",
        "coming",
        "count",
        "cursor",
        "dims",
        "dirty",
        "extra",
        "free",
        "index",
        "names",
        "reach",
    )

    def __init__(self, nodes: Nodes, extra: Sequence[str] = ()) -> None:
        self.names = names = list(nodes.cpu_idle_milli)
        self.index = {name: i for i, name in enumerate(names)}
        self.count = len(names)
        self.extra = list(extra)
        self.dims = 3 + len(self.extra)
        self.free: list[list[int]] = [
            list(nodes.cpu_idle_milli.values()),
            [nodes.memory_free_mega.get(name, 0) for name in names],
            [nodes.gpu_free.get(name, 0) for name in names],
        ]
        for key in self.extra:
            default = UNLIMITED if key == "pods" else 0
            self.free.append([
                (nodes.extended_free.get(name) or {}).get(key, default) for name in names
            ])
        self.coming: list[list[int]] = [[0] * self.count for _ in range(self.dims)]
        # Free room only shrinks between two `give` calls, so a node too small for a
        # shape stays too small and each shape's cursor only moves forward.
        self.cursor: dict[object, int] = {}
        # the same for free + coming room (`first_reachable`): it grows back when a pod
        # is released or room given back, which restarts these cursors
        self.reach: dict[object, int] = {}
        # nodes changed since a reader (the preemption search) last copied the room
        self.dirty: set[int] = set()
        self._tainted = any(
            t.effect in FILTERED_EFFECTS for f in nodes.facts.values() for t in f.taints
        )
        self._facts_by_name = nodes.facts
        self._shapes: dict[tuple[int, int, int, tuple[tuple[str, int], ...]], Shape] = {}
        self._eligible: dict[PodConstraints, Eligible | None] = {}
        self._verdicts: _Verdicts | None = None

    # -- shapes and eligibility -------------------------------------------------------

    def shape_of(
        self, cpu: int, memory: int, gpu: int, extended: Sequence[tuple[str, int]]
    ) -> Shape:
        """One pod's requests in this room's dimensions."""
        if not self.extra:
            return (cpu, memory, gpu)
        key = (cpu, memory, gpu, tuple(extended))
        shape = self._shapes.get(key)
        if shape is None:  # jobs share a few shapes: each is worked out once
            asked = dict(extended)
            shape = self._shapes[key] = (
                cpu, memory, gpu, *(1 if k == "pods" else asked.get(k, 0) for k in self.extra))
        return shape

    def pod_shape(self, pod: PodResources) -> Shape:
        return self.shape_of(
            pod.cpu_request_milli, pod.memory_request_mega, pod.gpu_request, pod.extended
        )

    def eligible(self, constraints: PodConstraints) -> Eligible | None:
        """The nodes a pod with these constraints may land on; None when it may use all."""
        result = self._eligible.get(constraints, _UNSET)
        if result is not _UNSET:
            return result  # type: ignore[return-value]
        if constraints == NO_CONSTRAINTS and not self._tainted:
            self._eligible[constraints] = None
            return None
        array = self._judged().mask(constraints)
        result = None if array.all() else Eligible(len(self._eligible), constraints, array)
        self._eligible[constraints] = result
        return result

    def node_facts(self) -> list[NodeFacts]:
        """Each node's facts (labels and taints), in the room's order."""
        return self._judged().facts

    def _judged(self) -> _Verdicts:
        if self._verdicts is None:
            self._verdicts = _verdicts(self.names, self._facts_by_name)
        return self._verdicts

    # -- room -------------------------------------------------------------------------

    def take(
        self, shape: Shape, allowed: Eligible | None = None, prefer: Eligible | None = None
    ) -> int:
        """Take free room for one pod on the first node where it fits; its index, or -1.

        `prefer` (nodes among `allowed`) is tried first: room jobs with fewer nodes
        cannot use (`choosy.prefer_uncontested`)."""
        nodes = self.take_many(shape, 1, allowed, prefer)
        return nodes[0] if nodes else -1

    def take_many(
        self, shape: Shape, count: int, allowed: Eligible | None = None,
        prefer: Eligible | None = None,
    ) -> list[int]:
        """Free room for up to `count` pods of one shape, first fit: the same nodes as
        `count` calls of `take`, one visit per node (a node takes all that fit there)."""
        nodes: list[int] = []
        if count <= 0:
            return nodes
        if prefer is not None:
            self._fill(shape, prefer, count, nodes)
        if len(nodes) < count:
            self._fill(shape, allowed, count, nodes)
        return nodes

    def _fill(self, shape: Shape, allowed: Eligible | None, count: int, out: list[int]) -> None:
        key: object = shape if allowed is None else (shape, allowed.key)
        start = self.cursor.get(key, 0)
        free, dims = self.free, self.dims
        asked = [(free[d], shape[d]) for d in range(dims) if shape[d] > 0]
        nodes: Iterable[int] = range(start, self.count)
        if allowed is not None:
            indices = allowed.indices
            nodes = indices[bisect_left(indices, start):]
        for index in nodes:
            units = count - len(out)
            for column, want in asked:
                units = min(units, column[index] // want)
                if units <= 0:
                    break
            if units > 0:
                for d in range(dims):
                    free[d][index] -= shape[d] * units
                out.extend([index] * units)
                self.dirty.add(index)
                if len(out) >= count:
                    self.cursor[key] = index
                    return
        self.cursor[key] = self.count

    def first_reachable(self, shape: Shape, allowed: Eligible | None = None) -> int:
        """The first node where `shape` fits in free + coming room (nothing taken), or -1:
        the preemption search's choice when no node has the free room."""
        key: object = shape if allowed is None else (shape, allowed.key)
        start = self.reach.get(key, 0)
        free, later, dims = self.free, self.coming, range(self.dims)
        nodes: Iterable[int] = range(start, self.count)
        if allowed is not None:
            indices = allowed.indices
            nodes = indices[bisect_left(indices, start):]
        for index in nodes:
            if all(free[d][index] + later[d][index] >= shape[d] for d in dims):
                self.reach[key] = index
                return index
        self.reach[key] = self.count
        return -1

    def fits(self, node: int, shape: Shape, coming: bool) -> bool:
        """Whether `shape` fits on `node` in its free room (plus its coming room)."""
        free, later = self.free, self.coming
        return all(
            shape[d] <= free[d][node] + (later[d][node] if coming else 0)
            for d in range(self.dims)
        )

    def take_at(self, node: int, shape: Shape) -> None:
        """Take room on `node` for a pod that may wait: free room first, then coming."""
        free, later = self.free, self.coming
        self.dirty.add(node)
        for d in range(self.dims):
            free[d][node] -= shape[d]
            if free[d][node] < 0 < later[d][node]:
                moved = min(-free[d][node], later[d][node])
                free[d][node] += moved
                later[d][node] -= moved

    def give(self, node: int, shape: Shape) -> None:
        """Return free room taken by `take` (a planned trainer that is dropped again)."""
        for d in range(self.dims):
            self.free[d][node] += shape[d]
        self.cursor.clear()
        self.reach.clear()
        self.dirty.add(node)

    def release(self, node: int, shape: Shape) -> None:
        """A pod on `node` is leaving: its room is coming, not free yet."""
        for d in range(self.dims):
            self.coming[d][node] += shape[d]
        self.reach.clear()
        self.dirty.add(node)

    def column(self, node: int, coming: bool) -> Shape:
        free, later = self.free, self.coming
        if coming:
            return tuple(free[d][node] + later[d][node] for d in range(self.dims))
        return tuple(free[d][node] for d in range(self.dims))
