"""The steps of `default`'s plan that place pods and shed trainers (see default.py).

Each step works on the shared per-node `Room`, the `Budget` and the `JobPlan`s;
all are pure arithmetic on copies of the policy's inputs.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

from edl.accounting.types import ClusterResource
from edl.policy.plan_state import Budget, JobPlan
from edl.policy.preempt import CostFn, Preemptor
from edl.policy.room import Eligible, Room, Shape

__all__ = [
    "grow",
    "make_room",
    "place_pending_pods",
    "place_unscheduled_trainers",
    "rebalance",
    "shrink_over_max_load",
    "shrink_over_quota",
]


LevelFn = Callable[[JobPlan, int], float]
Waiting = tuple[Shape, Eligible | None]  # a pod that fits nowhere yet: its shape, its nodes


def place_pending_pods(resources: ClusterResource, room: Room) -> list[Waiting]:
    """Reserve free room for pending non-trainer pods, highest priority first (as the
    scheduler's queue), each only on nodes it may use; returns those that fit nowhere."""
    deficit = []
    pods = sorted(
        resources.pending,
        key=lambda p: (-p.priority, -p.gpu_request, -p.cpu_request_milli, -p.memory_request_mega),
    )
    for pod in pods:
        shape = room.pod_shape(pod)
        allowed = room.eligible(pod.constraints)
        if room.take(shape, allowed) < 0:
            deficit.append((shape, allowed))
    return deficit


def place_unscheduled_trainers(plans: Sequence[JobPlan], room: Room) -> None:
    """Give free room to trainers that hold none yet, least fulfilled job first.

    Bound trainers beyond the target leave: named (largest hole first) when this
    plan lowers parallelism, else already the Job controller's to remove.
    """
    for plan in plans:
        surplus = len(plan.bound) - plan.target
        if surplus > 0:
            plan.bound.sort(key=lambda t: (t[1] < 0, -room.free[0][t[1]] if t[1] >= 0 else 0))
            leaving, plan.bound = plan.bound[:surplus], sorted(plan.bound[surplus:])
            if plan.target < plan.view.parallelism:
                for name, node in leaving:
                    if name:
                        plan.victims.append(name)
                        plan.victim_nodes.append(node)
                    if node >= 0:
                        room.release(node, plan.shape)

    def order(plan: JobPlan) -> tuple[float, str, str]:
        return (plan.fulfillment(len(plan.bound)), *plan.key)

    for plan in sorted(plans, key=order):
        for _ in range(plan.target - len(plan.bound)):
            node = room.take(plan.shape, plan.allowed, plan.prefer)
            if node < 0:
                plan.blocked = plan.target - plan.holding()
                break
            plan.planned_nodes.append(node)
            plan.placed(node)


def shrink_over_quota(plans: Sequence[JobPlan], budget: Budget, room: Room) -> None:
    """Settle namespace quotas the jobs' trainers overfill (the API server would refuse
    the extra pods at every attempt): while a quota stays past `hard` once the pods
    already leaving are gone, the most fulfilled job above min that it counts gives up
    a trainer — one its Job has not created yet first, else a running one (named, the
    largest hole), so a job below min in the namespace gets the quota it needs."""
    over = [p for p in plans if p.book is not None and p.book.over(p.quota)]
    while over:
        uncreated = [p for p in over if p.target > p.view.min_instance
                     and p.target > p.view.total and (p.blocked or p.planned_nodes)]
        created = [p for p in over if p.target > p.view.min_instance and p.bound]
        candidates = uncreated or created
        if not candidates:
            return
        plan = max(candidates, key=lambda p: (p.fulfillment(), p.key))
        book = plan.book
        assert book is not None
        cause = f"{book.binding(plan.quota)} cannot admit the namespace's pods"
        plan.shed(budget, room, cause)
        book.give(plan.quota, created=not uncreated)
        over = [p for p in over if p.book is not None and p.book.over(p.quota)]


def _fulfillment_cost(plan: JobPlan, count: int) -> float:
    return 1.0 - plan.fulfillment(count)


def shrink_over_max_load(
    plans: Sequence[JobPlan],
    budget: Budget,
    room: Room,
    max_load: float,
    shed_cost: LevelFn = _fulfillment_cost,
) -> None:
    """Shrink jobs while CPU requests exceed max load or GPU limits the cluster's GPUs,
    the cheapest trainer first (``shed_cost``; default: the most fulfilled job's)."""
    heap = [
        (shed_cost(plan, plan.target), *plan.key, index)
        for index, plan in enumerate(plans)
        if plan.target > plan.view.min_instance
    ]
    heapq.heapify(heap)
    cpu_over = f"CPU requests above {max_load:.0%} of the cluster"
    gpu_over = "GPU limits above the cluster's GPUs"
    while heap and (budget.cpu > budget.cpu_cap or budget.gpu > budget.gpu_cap):
        _, _, _, index = heapq.heappop(heap)
        plan = plans[index]
        if not (
            (budget.cpu > budget.cpu_cap and plan.view.cpu_request_milli > 0)
            or (budget.gpu > budget.gpu_cap and plan.view.gpu_limit > 0)
        ):
            continue  # shrinking this job would not lower what is over
        plan.shed(budget, room, cpu_over if budget.cpu > budget.cpu_cap else gpu_over)
        if plan.target > plan.view.min_instance:
            heapq.heappush(heap, (shed_cost(plan, plan.target), *plan.key, index))


def _settle(plan: JobPlan | None, room: Room, node: int, shape: Shape) -> None:
    """A waiting pod takes its room on `node` (free now, or coming once leavers exit)."""
    now = room.fits(node, shape, coming=False)
    room.take_at(node, shape)
    if plan is None:
        return
    if now:
        _placed_now(plan, node)
    else:
        plan.placed(node)
        plan.waiting += 1


def _placed_now(plan: JobPlan, node: int) -> None:
    """A blocked trainer of `plan` was given free room on `node`."""
    plan.placed(node)
    plan.planned_nodes.append(node)
    plan.blocked -= 1
    plan.waiting = min(plan.waiting, plan.blocked)


def make_room(
    plans: Sequence[JobPlan],
    budget: Budget,
    room: Room,
    deficit: list[Waiting],
    preemptor: Preemptor,
    shed_cost: LevelFn = _fulfillment_cost,
) -> list[Waiting]:
    """Preempt trainers for pending pods and for jobs below min-instance.

    Each waiting pod (services first, largest first; then the missing trainers of
    starving jobs) gets the node where the fewest, least costly trainers must go
    for it to fit (`Preemptor`): room already coming counts first, victims come
    from jobs above min (most fulfilled cheapest) that are not starving themselves.
    ``shed_cost(plan, count)``: what losing its ``count``-th trainer costs the job
    (default: 1 - fulfillment, so the most fulfilled give first).
    Returns the pods no node can be made to fit.
    """
    starving = {i for i, p in enumerate(plans) if p.holding() < p.view.min_instance}
    waiters: list[tuple[Shape, Eligible | None, int]] = [(s, a, -1) for s, a in deficit]
    for index in sorted(starving, key=lambda i: plans[i].key):
        plan = plans[index]
        waiters += [(plan.shape, plan.allowed, index)] * (plan.view.min_instance - plan.holding())
    if not waiters:
        return []
    parts = []
    if deficit:
        parts.append(f"{len(deficit)} pending pods that are not trainers")
    if starving:
        names = sorted(plans[i].view.name for i in starving)
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        parts.append(f"jobs below min-instance ({', '.join(names[:3])}{more})")
    cause = "make room for " + " and ".join(parts)

    def cost(index: int, extra: int) -> float | None:
        plan = plans[index]
        if index in starving or plan.target - extra <= plan.view.min_instance:
            return None
        return shed_cost(plan, plan.target - extra)

    return _rescue_all(plans, budget, room, waiters, cost, cause, preemptor)


def _rescue_all(
    plans: Sequence[JobPlan],
    budget: Budget,
    room: Room,
    waiters: list[tuple[Shape, Eligible | None, int]],
    cost: CostFn,
    cause: str,
    preemptor: Preemptor,
) -> list[Waiting]:
    """Find room for each waiter (plan index, or -1 for a pod that is not a trainer)."""
    hopeless: set[tuple[Shape, int]] = set()
    left: list[Waiting] = []
    for shape, allowed, index in waiters:
        kind = (shape, -1 if allowed is None else allowed.key)
        if kind in hopeless:
            left.append((shape, allowed))
            continue
        # the search's own first choices, without its numpy pass over every node: the
        # first node with free room, else the first with free + coming room
        node = room.take(shape, allowed)
        if node >= 0:
            if index >= 0:
                _placed_now(plans[index], node)
            continue
        node = room.first_reachable(shape, allowed)
        if node >= 0:
            _settle(plans[index] if index >= 0 else None, room, node, shape)
            continue
        rescue = preemptor.find(shape, cost, allowed)
        if rescue is None:
            hopeless.add(kind)
            left.append((shape, allowed))
            continue
        preemptor.shed(rescue, lambda i, name: plans[i].shed(budget, room, cause, victim=name))
        _settle(plans[index] if index >= 0 else None, room, rescue.node, shape)
    return left


def grow(plans: Sequence[JobPlan], budget: Budget, room: Room) -> None:
    """Water-fill free node room up to the fair shares, least fulfilled job first.

    When room, budget and quotas hold every job's share, the order cannot change
    any target: each job takes its growth in one batch (`_grow_whole`). Otherwise
    (or with topology rules, whose masks change per trainer) trainers are given
    one at a time to the least fulfilled job, checked budget, quota, then room.
    """
    heap = [
        (plan.fulfillment(), *plan.key, index)
        for index, plan in enumerate(plans)
        if not plan.shrunk and not plan.blocked and plan.target < plan.share
    ]
    heap.sort()
    if all(plan.topology is None for plan in plans) and _grow_whole(plans, budget, room, heap):
        return
    while heap:
        _, namespace, name, index = heapq.heappop(heap)
        plan = plans[index]
        shape = plan.shape
        cpu, memory = shape[0], shape[1]
        gpu_limit = plan.view.gpu_limit
        low = plan.view.min_instance
        span = plan.view.max_instance - low
        # Give this job units until it passes the next least fulfilled job (one heap
        # operation per batch instead of per trainer; same result as one at a time).
        rival = heap[0] if heap else None
        allowed, prefer, book, entry = plan.allowed, plan.prefer, plan.book, plan.quota
        while True:
            if not budget.fits(cpu, memory, gpu_limit):
                plan.stopped = "load"
                break
            if book is not None and not book.fits(entry):
                plan.stopped = "quota"
                break
            node = room.take(shape, allowed, prefer)
            if node < 0:
                plan.stopped = "room"
                break
            if book is not None:
                book.take(entry)
            plan.planned_nodes.append(node)
            plan.placed(node)
            plan.target += 1
            plan.grown = True
            budget.add(cpu, memory, gpu_limit, 1)
            if plan.target >= plan.share:
                break
            level = (plan.target - low) / span
            if rival is not None and (level, namespace, name) > rival[:3]:
                heapq.heappush(heap, (level, namespace, name, index))
                break


def _grow_whole(
    plans: Sequence[JobPlan], budget: Budget, room: Room,
    order: list[tuple[float, str, str, int]],
) -> bool:
    """Every job in `order` takes its whole growth at once (`Room.take_many`); undone,
    returning False, as soon as one cannot (then the order matters)."""
    free = [column[:] for column in room.free]
    cursor = dict(room.cursor)
    saved = (budget.cpu, budget.memory, budget.gpu)
    book = next((plan.book for plan in plans if plan.book is not None), None)
    left = [dict(row) for row in book.left] if book is not None else []
    done: list[tuple[JobPlan, int, int, bool]] = []
    for *_, index in order:
        plan = plans[index]
        want = plan.share - plan.target
        cpu, memory, gpu = plan.shape[0], plan.shape[1], plan.view.gpu_limit
        quota = plan.book.room_for(plan.quota) if plan.book is not None else None
        if budget.units(cpu, memory, gpu) < want or (quota is not None and quota < want):
            break
        done.append((plan, plan.target, len(plan.planned_nodes), plan.grown))
        nodes = room.take_many(plan.shape, want, plan.allowed, plan.prefer)
        plan.planned_nodes.extend(nodes)
        if plan.book is not None:
            for _ in nodes:
                plan.book.take(plan.quota)
        budget.add(cpu, memory, gpu, len(nodes))
        plan.target += len(nodes)
        plan.grown = True
        if len(nodes) < want:
            break
    else:
        return True
    for plan, target, planned, grown in done:  # undo: the order matters after all
        plan.target, plan.grown = target, grown
        del plan.planned_nodes[planned:]
    for d, column in enumerate(free):
        room.free[d][:] = column
    room.cursor.clear()
    room.cursor.update(cursor)
    room.reach.clear()
    budget.cpu, budget.memory, budget.gpu = saved
    if book is not None:
        book.left[:] = left
    return False


def rebalance(
    plans: Sequence[JobPlan],
    budget: Budget,
    room: Room,
    preemptor: Preemptor,
    level_of: LevelFn = JobPlan.fulfillment,
) -> None:
    """Jobs above their fair share give trainers to jobs stuck below theirs.

    Only where it helps: each trainer a job below its share lacks is a waiting pod
    for the preemption search, with victims only from jobs above their share
    (never below it, nor below min) that did not grow in this plan. When room is
    free but the load cap stopped the growth, the donors shed for the budget. A
    job below its share grows in a later plan, once the room is really free.
    ``level_of(plan, count)`` is the fairness level a donor must keep above the
    taker's: fulfillment for `default`, the share held for `goodput`; -inf means the
    job may not go down to ``count`` at all (a cooldown, its floor, its share).
    """
    waiters: list[tuple[Shape, int]] = []  # (shape, taker); its nodes: the taker's
    for index, plan in enumerate(plans):
        if plan.shrunk or (plan.target >= plan.share and not plan.blocked):
            continue
        missing = plan.blocked - plan.waiting + max(0, plan.share - plan.target)
        waiters += [(plan.shape, index)] * max(0, min(missing, plan.share - plan.holding()))
    if not waiters:
        return
    def held_level(index: int) -> float:
        plan = plans[index]
        return level_of(plan, plan.holding() + plan.waiting)

    waiters.sort(key=lambda w: (held_level(w[1]), plans[w[1]].key))
    takers = {index for _, index in waiters}
    granted = dict.fromkeys(takers, 0)
    level = [0.0]  # the taker's fulfillment once it holds the trainer searched for

    def cost(index: int, extra: int) -> float | None:
        """A donor gives only while it stays at least as fulfilled as the taker
        becomes (max-min fairness; moving a trainer between equals is churn), never
        below min; those most above their share give first."""
        plan = plans[index]
        after = plan.target - extra - 1
        if index in takers or plan.grown or after < plan.view.min_instance:
            return None
        kept = level_of(plan, after)
        if kept == -math.inf or kept < level[0]:  # -inf: held where it is (not a donor),
            return None  # even for a taker whose own level is -inf (below its floor)
        span = plan.view.max_instance - plan.view.min_instance
        return (plan.share - after) / span

    def shed(index: int, victim: str | None, what: str = "room") -> None:
        plan = plans[index]
        cause = f"give {what} to jobs below their fair share (this job's share: {plan.share})"
        plan.shed(budget, room, cause, victim=victim)

    budget_cause = "CPU/GPU budget under max load"
    # per shape, the lowest taker level at which no room could be made: a higher
    # level only allows fewer donors, so it is hopeless too
    hopeless: dict[tuple[Shape, int], float] = {}
    for shape, index in waiters:
        taker = plans[index]
        kind = taker.kind
        # the taker's level counts the trainers that hold room, not pending ones
        level[0] = level_of(taker, taker.holding() + taker.waiting + granted[index] + 1)
        if level[0] >= hopeless.get(kind, 2.0):
            continue
        rescue = preemptor.find(shape, cost, taker.allowed)
        if rescue is None:
            hopeless[kind] = level[0]
            continue
        preemptor.shed(rescue, shed)
        granted[index] += 1
        room.take_at(rescue.node, shape)
        taker.placed(rescue.node)
        budget.add(shape[0], shape[1], taker.view.gpu_limit, 1)  # it grows next plan
        if taker.blocked > taker.waiting:
            taker.waiting += 1
        while True:  # the load cap: donors above their share shed for the budget too
            cpu_over = budget.cpu > budget.cpu_cap and shape[0] > 0
            gpu_over = budget.gpu > budget.gpu_cap and taker.view.gpu_limit > 0
            donors = [
                (price, plans[i].key, i)
                for i in range(len(plans))
                if (cpu_over and plans[i].shape[0] > 0)
                or (gpu_over and plans[i].view.gpu_limit > 0)
                if (price := cost(i, 0)) is not None
            ]
            if not donors:
                break
            donor = plans[min(donors)[2]]
            if donor.blocked or donor.planned_nodes or not donor.bound:
                shed(min(donors)[2], None, budget_cause)  # holding no bound room: first
                continue
            name, node = donor.bound[donor.largest_hole(room)]
            shed(min(donors)[2], name or None, budget_cause)
            preemptor.drop(min(donors)[2], name, node)

