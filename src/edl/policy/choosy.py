"""Max-min fairness under placement constraints (after Choosy, EuroSys '13).

A job that may use few nodes (a narrow job) loses to a job that may use many (a wide
job) whenever the wide job's trainers sit on the narrow job's nodes while room the
narrow job cannot use lies idle. Fair shares already count what each job *can*
use (`shares.py`: one pool per eligible node set); these steps make placement follow:

* `prefer_uncontested`: a job places trainers first on the nodes of its set that no
  narrower job still wants, and only then on contested ones.
* `relocate`: a narrow job below its min (run before growth, so a wide job at its min
  is moved rather than grown) and, once shares are set, below its share, whose nodes
  are full takes room from wide jobs' trainers there that could run elsewhere: each such trainer is
  named as a victim only when free room for it exists on nodes outside the narrow
  job's set (that room is held for it: it grows back there in the next plan, where
  `prefer_uncontested` sends it). The wide job's count dips for one interval only.
* `drop_unplaceable`: above min, a target is the trainers that hold room plus those
  room is coming for; trainers that fit nowhere are not left Pending (they would be
  charged to quota, make a cluster autoscaler buy nodes, and take room the plan gave
  another job): the target drops to what can land, and the job grows again onto
  concrete room in a later plan.
* `rebalance_quota`: jobs whose trainers count against one namespace quota share it
  by fair shares (`shares.py` water-fills the quota as a pool); a job above its share
  gives back quota (its trainer leaves) to a job below its share that the quota
  stops, so equal jobs end within one trainer of each other.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edl.accounting.eligibility import NO_CONSTRAINTS
from edl.policy.plan_state import Budget, JobPlan
from edl.policy.preempt import Preemptor
from edl.policy.room import Eligible, Room
from edl.policy.steps import LevelFn

__all__ = ["drop_unplaceable", "prefer_uncontested", "rebalance_quota", "relocate"]


def _bits(allowed: Eligible | None, count: int) -> int:
    """A node set as an int bitset (bit i: node i)."""
    if allowed is None:
        return (1 << count) - 1
    return int.from_bytes(np.packbits(allowed.array, bitorder="little").tobytes(), "little")


class _Masks:
    """Per plan: its node set as a bitset; Eligible masks made from bitsets."""

    def __init__(self, plans: Sequence[JobPlan], room: Room) -> None:
        self.count = room.count
        cache: dict[int, int] = {}
        self.bits = []
        for plan in plans:
            key = -1 if plan.allowed is None else plan.allowed.key
            if key not in cache:
                cache[key] = _bits(plan.allowed, room.count)
            self.bits.append(cache[key])
        self._made: dict[int, Eligible] = {}
        self._next = -2  # keys below -1 never collide with Room.eligible's

    def eligible(self, bits: int) -> Eligible:
        made = self._made.get(bits)
        if made is None:
            raw = np.frombuffer(bits.to_bytes((self.count + 7) // 8 or 1, "little"),
                                dtype=np.uint8)
            flags = np.unpackbits(raw, bitorder="little")[: self.count].astype(bool).tolist()
            made = self._made[bits] = Eligible(self._next, NO_CONSTRAINTS, flags)
            self._next -= 1
        return made


def _wants_more(plan: JobPlan) -> bool:
    return plan.target < plan.view.max_instance or plan.blocked > 0


def prefer_uncontested(plans: Sequence[JobPlan], room: Room) -> _Masks | None:
    """Set `prefer` on every plan whose node set strictly contains the set of some job
    that still wants trainers: its nodes minus every such narrower set."""
    if room.count == 0 or all(plan.allowed is None for plan in plans):
        return None
    masks = _Masks(plans, room)
    wanting = {masks.bits[i] for i, plan in enumerate(plans) if _wants_more(plan)}
    preferred: dict[int, Eligible | None] = {}  # per node set (plans share a few)
    for i, plan in enumerate(plans):
        if plan.topology is not None:
            continue  # its mask follows its own rules (policy/topology.py)
        mine = masks.bits[i]
        if mine not in preferred:
            contested = 0
            for other in wanting:
                if other != mine and other & ~mine == 0:
                    contested |= other
            free = mine & ~contested
            preferred[mine] = masks.eligible(free) if contested and free else None
        if preferred[mine] is not None:
            plan.prefer = preferred[mine]
    return masks


def relocate(
    plans: Sequence[JobPlan], budget: Budget, room: Room, preemptor: Preemptor,
    masks: _Masks | None,
) -> None:
    """Wide jobs' trainers leave the only nodes a job below its share can use, where
    free room elsewhere is held for them (see the module doc)."""
    if masks is None:
        return
    bits = masks.bits
    takers = [
        i for i, plan in enumerate(plans)
        if plan.allowed is not None and not plan.shrunk
        and (plan.stopped == "room" or plan.blocked > plan.waiting)
        and plan.holding() + plan.waiting < max(plan.share, plan.view.min_instance)
    ]
    if not takers:
        return
    takers.sort(key=lambda i: (plans[i].fulfillment(plans[i].holding()), plans[i].key))
    held: dict[tuple[int, int], list[int]] = {}  # (mover, taker) -> nodes held for it
    for t in takers:
        taker = plans[t]
        starving = [False]  # below its min: movers may dip below theirs (they grow back)
        outside = {j: bits[j] & ~bits[t] for j in range(len(plans))}

        def cost(
            index: int, extra: int, t: int = t, starving: list[bool] = starving,
            outside: dict[int, int] = outside,
        ) -> float | None:
            plan = plans[index]
            if (index == t or plan.grown or not outside[index] or index in takers
                    or plan.topology is not None):
                return None
            floor = 1 if starving[0] else plan.view.min_instance  # it grows back at once
            if plan.target - extra - 1 < max(0, floor):
                return None
            spare = held.setdefault((index, t), [])
            while len(spare) <= extra:  # hold room elsewhere for each trainer it moves
                node = room.take(plan.shape, masks.eligible(outside[index]))
                if node < 0:
                    return None
                spare.append(node)
            span = plan.view.max_instance - plan.view.min_instance
            return (plan.share - (plan.target - extra)) / max(1, span)

        missing = max(taker.share, taker.view.min_instance) - taker.holding() - taker.waiting
        for _ in range(missing):
            starving[0] = taker.holding() + taker.waiting < taker.view.min_instance
            rescue = preemptor.find(taker.shape, cost, taker.allowed)
            if rescue is None or not rescue.victims:
                break  # room for it is free or coming: rebalance/growth saw to it
            for index, name in rescue.victims:
                plans[index].shed(
                    budget, room, f"moved off nodes {taker.view.name} alone can use",
                    victim=name)
                preemptor.drop(index, name, rescue.node)
                held[(index, t)].pop()  # that room stays taken: it grows back there
            room.take_at(rescue.node, taker.shape)
            taker.placed(rescue.node)
            budget.add(taker.shape[0], taker.shape[1], taker.view.gpu_limit, 1)
            taker.waiting += 1
            taker.blocked = max(taker.blocked, taker.waiting)
    for (index, _), nodes in held.items():
        for node in nodes:
            room.give(node, plans[index].shape)


def rebalance_quota(
    plans: Sequence[JobPlan], budget: Budget, room: Room, level_of: LevelFn
) -> None:
    """Jobs above their share give quota to jobs of the same quota that it stops below
    theirs: the donor's trainer leaves, its quota comes back once it is gone."""
    takers = [p for p in plans if p.book is not None and p.stopped == "quota"
              and not p.shrunk and p.target < p.share]
    if not takers:
        return
    given = {p.key: 0 for p in takers}
    while True:
        open_ = [p for p in takers if p.target + given[p.key] < p.share]
        if not open_:
            return
        taker = min(open_, key=lambda p: (level_of(p, p.target + given[p.key]), p.key))
        assert taker.book is not None
        rows = {(i, key) for i, key, _ in taker.book.entries[taker.quota]}
        after = level_of(taker, taker.target + given[taker.key] + 1)
        donors = [
            p for p in plans
            if p.book is taker.book and p.quota >= 0 and not p.grown and p.key not in given
            and p.target > max(p.share, p.view.min_instance)
            and rows & {(i, key) for i, key, _ in taker.book.entries[p.quota]}
            and level_of(p, p.target - 1) >= after
        ]
        if not donors:
            takers.remove(taker)
            if not takers:
                return
            continue
        donor = max(donors, key=lambda p: (p.target - p.share, p.key))
        created = donor.target <= donor.view.total and not donor.planned_nodes
        cause = (f"give quota to {taker.view.name} below its fair share "
                 f"(this job's share: {donor.share})")
        donor.shed(budget, room, cause)
        taker.book.give(donor.quota, created=created)
        given[taker.key] += 1


def drop_unplaceable(plans: Sequence[JobPlan], budget: Budget, room: Room) -> None:
    """Lower each target above min by the trainers that hold no room and have none
    coming (never below min, nor below what holds room)."""
    for plan in plans:
        stuck = plan.blocked - plan.waiting
        floor = max(plan.view.min_instance, plan.holding() + plan.waiting)
        drop = min(stuck, plan.target - floor)
        if drop <= 0 or plan.grown or plan.shrunk:  # shrunk: its unplaced went first
            continue
        for _ in range(drop):
            plan.shed(budget, room, f"{drop} pending trainers fit no node: the target "
                      "follows what can land")
        if plan.book is not None:
            for _ in range(drop):
                plan.book.give(plan.quota, created=True)
