"""Room for a waiting pod, found like the scheduler's preemption finds it.

For a pod that fits no node (a service scaling up, a trainer of a job below its
min or its fair share) every node is a candidate: its free room, plus the room
of trainers already leaving it, plus the room of the trainers the caller allows
to be shed there. On each node the victims are taken cheapest first, and only a
trainer that holds something the pod still lacks on that node counts (a CPU-only
trainer on a GPU node is useful when the pod lacks that node's CPU; a GPU trainer
is useless to a pod that lacks only memory it does not hold). A victim set that
turns out larger than needed is pruned. The node that needs the fewest victims,
then the least costly ones, wins; nothing is shed when no node can be made to fit.

Cost: a numpy filter over all nodes per waiting pod (free + coming + everything
sheddable must cover the pod), then a detailed look only at the nodes that pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from edl.policy.plan_state import JobPlan
from edl.policy.room import Eligible, Room, Shape

__all__ = ["CostFn", "Preemptor", "Rescue"]

# (plan index, trainers of it already chosen) -> cost of shedding one more, or None
# when that job may not give another (its floor: min-instance, or its fair share)
CostFn = Callable[[int, int], float | None]


class Rescue:
    """Where a waiting pod goes: the node, and the bound trainers to shed there."""

    __slots__ = ("node", "victims")

    def __init__(self, node: int, victims: list[tuple[int, str]]) -> None:
        self.node = node
        self.victims = victims  # (plan index, pod name)


class Preemptor:
    """Finds and frees room for waiting pods over a plan's per-node model."""

    def __init__(self, room: Room, plans: Sequence[JobPlan]) -> None:
        self.room, self.plans = room, plans
        # most plans never search, and most searches end in free or coming room:
        # copy the room on the first search, index the trainers on the first that
        # needs victims
        self._ready = False
        self._indexed = False

    def _copy_room(self) -> None:
        self._ready = True
        room = self.room
        count, dims = room.count, room.dims
        # copies of the room, refreshed column by column from `room.dirty`: free room,
        # free + coming, and (`_index`) that + every trainer that could be shed
        self.free = np.array(room.free, dtype=np.int64).reshape(dims, count)
        self.total = self.free + np.array(room.coming, dtype=np.int64).reshape(dims, count)
        room.dirty.clear()

    def _index(self) -> None:
        self._indexed = True
        room, plans = self.room, self.plans
        count, dims = room.count, room.dims
        # trainers that could ever be shed, per node: (plan index, pod name)
        self.on_node: list[list[tuple[int, str]]] = [[] for _ in range(count)]
        held = np.zeros((dims, count), dtype=np.int64)
        by_shape: dict[Shape, list[int]] = {}
        for index, plan in enumerate(plans):
            nodes = by_shape.setdefault(plan.shape, [])
            for name, node in plan.bound:
                if node >= 0 and name:
                    self.on_node[node].append((index, name))
                    nodes.append(node)
        for shape, nodes in by_shape.items():  # one count per shape, not per job
            if nodes:
                counts = np.bincount(np.array(nodes), minlength=count)
                held += np.outer(np.array(shape, dtype=np.int64), counts)
        self.held = held
        self.ceiling = self.total + held

    def _sync(self) -> None:
        if not self._ready:
            self._copy_room()
        room = self.room
        if not room.dirty:
            return
        nodes = np.fromiter(room.dirty, dtype=np.int64, count=len(room.dirty))
        free = np.array([[column[n] for n in nodes.tolist()] for column in room.free],
                        dtype=np.int64).reshape(room.dims, nodes.size)
        coming = np.array([[column[n] for n in nodes.tolist()] for column in room.coming],
                          dtype=np.int64).reshape(room.dims, nodes.size)
        self.free[:, nodes] = free
        self.total[:, nodes] = free + coming
        if self._indexed:
            self.ceiling[:, nodes] = self.total[:, nodes] + self.held[:, nodes]
        room.dirty.clear()

    def find(self, shape: Shape, cost: CostFn, allowed: Eligible | None = None) -> Rescue | None:
        """The best place for one pod of `shape` among the nodes it may use (`allowed`);
        victims empty when room is (coming) free."""
        room = self.room
        if room.count == 0:
            return None
        self._sync()
        want = np.array(shape, dtype=np.int64)[:, None]
        total = self.total
        fits = (total >= want).all(axis=0)
        if allowed is not None:
            fits &= allowed.array
        ready = np.flatnonzero(fits)
        if ready.size:
            # prefer the first node where it fits now, else the first where room is coming
            now = ready[(self.free[:, ready] >= want).all(axis=0)]
            return Rescue(int(now[0] if now.size else ready[0]), [])
        if not self._indexed:
            self._index()
        fits = (self.ceiling >= want).all(axis=0)
        if allowed is not None:
            fits &= allowed.array
        candidates = np.flatnonzero(fits)
        best: tuple[int, float, int] | None = None
        best_victims: list[tuple[int, str]] = []
        for node in candidates.tolist():
            victims, total_cost = self._victims_on(node, shape, total[:, node], cost)
            if victims is None:
                continue
            rank = (len(victims), total_cost, node)
            if best is None or rank < best:
                best, best_victims = rank, victims
        if best is None:
            return None
        return Rescue(best[2], best_victims)

    def _victims_on(
        self, node: int, shape: Shape, have: np.ndarray, cost: CostFn
    ) -> tuple[list[tuple[int, str]] | None, float]:
        """Cheapest useful victims on one node that make `shape` fit, pruned; or None."""
        dims = range(len(shape))
        missing = [shape[d] - int(have[d]) for d in dims]
        plans = self.plans
        taken: dict[int, int] = {}
        priced = []
        for index, name in self.on_node[node]:
            price = cost(index, 0)
            if price is not None:
                priced.append((price, name, index))
        priced.sort()
        chosen: list[tuple[float, str, int]] = []
        for _, name, index in priced:
            if all(m <= 0 for m in missing):
                break
            # a job gives at most what the cost function allows; each next one costs more
            price = cost(index, taken.get(index, 0))
            if price is None:
                continue
            trainer = plans[index].shape
            if not any(missing[d] > 0 and trainer[d] > 0 for d in dims):
                continue  # holds nothing the pod still lacks here: useless to shed
            chosen.append((price, name, index))
            taken[index] = taken.get(index, 0) + 1
            for d in dims:
                missing[d] -= trainer[d]
        if any(m > 0 for m in missing):
            return None, 0.0
        # prune: drop the costliest victims the pod does not need after all
        for victim in sorted(chosen, reverse=True):
            trainer = plans[victim[2]].shape
            if all(missing[d] + trainer[d] <= 0 for d in dims):
                chosen.remove(victim)
                for d in dims:
                    missing[d] += trainer[d]
        return [(index, name) for _, name, index in chosen], sum(p for p, _, _ in chosen)

    def shed(self, rescue: Rescue, shed_one: Callable[[int, str], object]) -> None:
        """Carry out a rescue's victims (the caller sheds; this keeps the index true)."""
        for index, name in rescue.victims:
            shed_one(index, name)
            self.drop(index, name, rescue.node)

    def drop(self, index: int, name: str, node: int) -> None:
        """A trainer left the plan: it is no longer a candidate on its node."""
        if self._indexed and node >= 0 and (index, name) in self.on_node[node]:
            self.on_node[node].remove((index, name))
            shape = self.plans[index].shape
            for d in range(len(shape)):
                self.held[d, node] -= shape[d]
                self.ceiling[d, node] -= shape[d]
