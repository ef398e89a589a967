"""Placement-aware fair shares: a job's share counts only room its trainers can use.

Water-filling over the aggregate capacity (the first `default`) gave a job with
12-core trainers a share of 8-core nodes it can never run on, and then shrank
other jobs toward shares that nobody could fill. Here every distinct trainer
shape defines the nodes it fits on, given the room trainers may use there
(free + coming + the room elastic trainers hold now), and a *pool*: the jobs whose
nodes all lie among those, and what those nodes can hold of the pool's shapes
(whole trainers per node: a 12-core trainer uses 12 of a 16-core node). Every
pool's budget bounds its members together (`fairshare.fair_shares`), and the
whole budget under max load bounds everyone. A job's taints, tolerations, nodeSelector
and required node affinity narrow its node set the same way (`Room.eligible`): jobs
pool by kind, (shape, eligible nodes), so a job that may use only the tainted GPU
pool shares that pool and nothing else. Each namespace quota (per capped resource)
that counts trainers is one more limit: its members' trainers together get what it
leaves them (`quotas.QuotaBook`), water-filled like a pool, so jobs of one quota get
fair shares of it rather than first come, first served.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

import numpy as np

from edl.policy.fairshare import Demand, Pool, fair_shares
from edl.policy.plan_state import Budget, JobPlan
from edl.policy.room import Room, Shape

__all__ = ["assign_fair_shares"]

_NODE = itemgetter(1)  # a bound trainer's node


def assign_fair_shares(plans: Sequence[JobPlan], budget: Budget, room: Room) -> None:
    """Set `share` on every plan: water-filled over the load budget and the pools."""
    if not plans:
        return
    trainer_cpu = sum(p.target * p.view.cpu_request_milli for p in plans)
    trainer_memory = sum(p.target * p.view.memory_request_mega for p in plans)
    trainer_gpu = sum(p.target * p.view.gpu_limit for p in plans)
    demands = [
        Demand(
            p.view.min_instance,
            p.view.max_instance,
            p.view.cpu_request_milli,
            p.view.memory_request_mega,
            p.view.gpu_limit,
        )
        for p in plans
    ]
    shares = fair_shares(
        demands,
        cpu=budget.cpu_cap - (budget.cpu - trainer_cpu),
        memory=budget.memory_cap - (budget.memory - trainer_memory),
        gpu=budget.gpu_cap - (budget.gpu - trainer_gpu),
        pools=_pools(plans, room),
        limits=_quota_limits(plans),
    )
    for plan, share in zip(plans, shares, strict=True):
        plan.share = share


def _quota_limits(plans: Sequence[JobPlan]) -> list[tuple[list[int], int]]:
    """One limit per (quota, resource) that counts some job's trainers: each member's
    cost per trainer, and what the quota leaves for all of them together."""
    rows: dict[tuple[int, str], dict[int, int]] = {}
    book = None
    for index, plan in enumerate(plans):
        if plan.book is None or plan.quota < 0:
            continue
        book = plan.book
        for i, key, cost in book.entries[plan.quota]:
            rows.setdefault((i, key), {})[index] = cost
    if book is None:
        return []
    out = []
    for (i, key), costs in sorted(rows.items()):
        held = sum(plans[j].target * cost for j, cost in costs.items())
        budget = book.left[i][key] + book.coming[i][key] + held
        out.append(([costs.get(j, 0) for j in range(len(plans))], max(0, budget)))
    return out


def _trainer_nodes(plans: Sequence[JobPlan]) -> dict[Shape, np.ndarray]:
    """Per trainer shape, the node of every trainer that holds room (-1: unknown)."""
    by_shape: dict[Shape, list[int]] = {}
    for plan in plans:
        nodes = by_shape.setdefault(plan.shape, [])
        nodes.extend(map(_NODE, plan.bound))
        nodes += plan.planned_nodes
    return {shape: np.array(nodes, dtype=np.int64) for shape, nodes in by_shape.items()}


def usable_room(
    plans: Sequence[JobPlan], room: Room, nodes: dict[Shape, np.ndarray] | None = None
) -> np.ndarray:
    """Per node (3 x nodes): the room elastic trainers could use if they had it all."""
    usable = np.array(room.free, dtype=np.int64).reshape(room.dims, room.count) + np.array(
        room.coming, dtype=np.int64).reshape(room.dims, room.count)
    for shape, held in (nodes or _trainer_nodes(plans)).items():  # one count per shape
        held = held[held >= 0]
        if held.size:
            counts = np.bincount(held, minlength=room.count)
            usable += np.outer(np.array(shape, dtype=np.int64), counts)
    return usable


def _per_node(usable: np.ndarray, shape: Shape) -> np.ndarray:
    """How many trainers of `shape` each node could hold (0 where it fits nowhere)."""
    fits = np.full(usable.shape[1], np.iinfo(np.int64).max, dtype=np.int64)
    for d in range(len(shape)):
        if shape[d] > 0:
            fits = np.minimum(fits, np.maximum(usable[d], 0) // shape[d])
    if all(amount == 0 for amount in shape):
        return np.zeros(usable.shape[1], dtype=np.int64)
    return fits


def _pools(plans: Sequence[JobPlan], room: Room) -> list[Pool]:
    """One pool per distinct set of nodes some kind of trainer (its shape and the nodes
    its constraints allow) fits on."""
    if room.count == 0:
        return []
    nodes_of = _trainer_nodes(plans)
    if any(held.size and held.min() < 0 for held in nodes_of.values()):
        return []  # where some trainers run is unknown: the aggregate budget only
    usable = usable_room(plans, room, nodes_of)
    plan_kinds = [p.kind for p in plans]
    masks = dict(zip(plan_kinds, (p.allowed for p in plans), strict=True))
    kinds = sorted(masks)
    position = {kind: k for k, kind in enumerate(kinds)}
    of_plan = np.array([position[kind] for kind in plan_kinds], dtype=np.int64)
    slots = np.zeros((len(kinds), room.count), dtype=np.int64)
    by_shape: dict[Shape, np.ndarray] = {}  # many kinds share a shape
    for k, kind in enumerate(kinds):
        per_node = by_shape.get(kind[0])
        if per_node is None:
            per_node = by_shape[kind[0]] = _per_node(usable, kind[0])
        allowed = masks[kind]
        slots[k] = per_node if allowed is None else np.where(allowed.array, per_node, 0)
    eligible = slots > 0  # kinds x nodes
    some = np.array([any(kind[0]) for kind in kinds], dtype=bool)  # asks for something
    # per kind and resource: what one trainer asks (the first three dimensions)
    asks = np.array([kind[0][:3] for kind in kinds], dtype=np.int64).reshape(len(kinds), 3)
    # kinds are sorted by shape: each shape's kinds lie side by side
    shape_index = {shape: i for i, shape in enumerate(by_shape)}
    shape_of = np.array([shape_index[kind[0]] for kind in kinds], dtype=np.int64)
    grouped = bool((asks >= 0).all())  # then ask x most = the most of ask x each
    pools: list[Pool] = []
    seen: set[bytes] = set()
    packed = np.packbits(eligible, axis=1)  # the same sets, 8 nodes a byte
    for k in range(len(kinds)):
        nodes = eligible[k]
        key = packed[k].tobytes()
        if key in seen or not some[k]:
            continue
        seen.add(key)
        inside = some & ~(packed & ~packed[k]).any(axis=1)  # kinds whose nodes are within
        # what those nodes can hold of the pool's kinds: per node, per resource, the
        # most any member kind can use there (whole trainers), summed over the nodes
        held = np.zeros((3, int(nodes.sum())), dtype=np.int64)
        members = np.flatnonzero(inside)
        if grouped:  # kinds of one shape: one product with the most any of them holds
            for same in np.split(members, np.flatnonzero(np.diff(shape_of[members])) + 1):
                most = slots[same][:, nodes].max(axis=0)
                np.maximum(held, np.outer(asks[same[0]], most), out=held)
        else:
            for member in members.tolist():
                np.maximum(held, np.outer(asks[member], slots[member, nodes]), out=held)
        budget = held.sum(axis=1)
        pools.append((inside[of_plan].tolist(), (int(budget[0]), int(budget[1]), int(budget[2]))))
    return _merge_alike(pools)


def _merge_alike(pools: list[Pool]) -> list[Pool]:
    """Pools with the same members bound them by the least of their budgets (one row
    each in the water-filling instead of one per node set: constraints make many)."""
    merged: dict[tuple[bool, ...], tuple[int, int, int]] = {}
    for members, budget in pools:
        key = tuple(members)
        old = merged.get(key)
        merged[key] = budget if old is None else (
            min(old[0], budget[0]), min(old[1], budget[1]), min(old[2], budget[2]))
    return [(list(members), budget) for members, budget in merged.items()]
