"""The state of one plan while `default` makes it: the budget and one record per job.

A job's trainers are modelled where they are: `bound` lists the pods that hold
room on a known node (name, node index), `planned_nodes` the room this plan gave
to trainers that hold none yet, `blocked` the ones that fit nowhere. Shedding a
trainer removes, like the Job controller, the unplaced ones first, then the
planned ones, then a bound pod named by the caller (or the one whose leaving
opens the largest hole).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from edl.accounting.types import ClusterResource
from edl.policy import load_cap
from edl.policy.base import JobView
from edl.policy.quotas import QuotaBook
from edl.policy.room import Eligible, Room, Shape

__all__ = ["Budget", "JobPlan", "build_plans"]

UNKNOWN_NODE = -1  # a bound trainer whose node the view does not say (or the room lacks)


@dataclass(slots=True)
class Budget:
    """Aggregate requests once every plan is carried out, against max_load_desired."""

    cpu: int
    gpu: int
    memory: int
    cpu_cap: int
    gpu_cap: int
    memory_cap: int

    def fits(self, cpu: int, memory: int, gpu: int) -> bool:
        return (
            self.cpu + cpu <= self.cpu_cap
            and (gpu == 0 or self.gpu + gpu <= self.gpu_cap)
            and (memory == 0 or self.memory + memory <= self.memory_cap)
        )

    def units(self, cpu: int, memory: int, gpu: int) -> int:
        """How many pods of these requests `fits` admits one after another."""
        if cpu == 0 and self.cpu > self.cpu_cap:
            return 0
        n = 1 << 62
        for used, cap, each in ((self.cpu, self.cpu_cap, cpu), (self.gpu, self.gpu_cap, gpu),
                                (self.memory, self.memory_cap, memory)):
            if each > 0:
                n = min(n, (cap - used) // each)
        return max(0, n)

    def add(self, cpu: int, memory: int, gpu: int, count: int) -> None:
        self.cpu += cpu * count
        self.memory += memory * count
        self.gpu += gpu * count


@dataclass(slots=True)
class JobPlan:
    """The plan of one elastic job while it is being made."""

    view: JobView
    target: int
    bound: list[tuple[str, int]] = field(default_factory=list)  # kept pods: (name, node)
    planned_nodes: list[int] = field(default_factory=list)  # room taken in this plan
    blocked: int = 0  # trainers of the target that hold no room yet and fit no node
    waiting: int = 0  # of those, trainers for which room is on its way (leaving pods)
    victims: list[str] = field(default_factory=list)  # bound pods this plan removes
    victim_nodes: list[int] = field(default_factory=list)
    stopped: str = ""  # why growth stopped below the fair share: "room" or "load"
    share: int = 0
    shrunk: bool = False
    grown: bool = False
    causes: list[str] = field(default_factory=list)
    by_hole: bool = False  # `bound` is sorted by its nodes' free room (largest_hole)
    shape: Shape = (0, 0, 0)  # one trainer's requests in the room's dimensions
    allowed: Eligible | None = None  # the nodes its trainers may use (None: every node)
    prefer: Eligible | None = None  # of those, the ones no narrower job wants (choosy.py)
    topology: Any = None  # policy.topology.TopologyState when its trainers carry rules
    quota: int = -1  # its entry in `book` (-1: no quota of its namespace counts it)
    book: QuotaBook | None = None  # the namespace quotas, shared by every plan
    key: tuple[str, str] = ("", "")  # the view's (namespace, name): every step sorts by it

    def __post_init__(self) -> None:
        self.key = self.view.key

    def placed(self, node: int) -> None:
        """A trainer of this plan was given room on `node`: keep its topology rules."""
        if self.topology is not None:
            self.topology.placed(node)

    def quota_fits(self) -> bool:
        """Whether its namespace's quotas admit one more trainer."""
        return self.book is None or self.book.fits(self.quota)

    def quota_take(self) -> None:
        if self.book is not None:
            self.book.take(self.quota)

    @property
    def kind(self) -> tuple[Shape, int]:
        """Trainers alike for placement: same requests, same eligible nodes."""
        return self.shape, -1 if self.allowed is None else self.allowed.key


    def fulfillment(self, target: int | None = None) -> float:
        view = self.view
        count = self.target if target is None else target
        return (count - view.min_instance) / (view.max_instance - view.min_instance)

    def holding(self) -> int:
        """Trainers that hold (or were given) node room."""
        return len(self.bound) + len(self.planned_nodes)

    def largest_hole(self, room: Room) -> int:
        """Index in `bound` of the trainer on the node with the most free room.

        `bound` is sorted by that once (the last is the best) and kept in that order
        while trainers are taken from its end, so shedding many costs O(n log n), not
        O(n^2); the order may lag behind later changes of free room (a heuristic).
        """
        if not self.by_hole:
            free_cpu = room.free[0]
            self.bound.sort(
                key=lambda t: (free_cpu[t[1]] if t[1] >= 0 else -(1 << 62), t[0])
            )
            self.by_hole = True
        return len(self.bound) - 1

    def shed(self, budget: Budget, room: Room, cause: str, victim: str | None = None) -> int:
        """Drop one trainer; the node whose room it frees, or -1 (it held none).

        `victim` names the bound pod to remove (it must be in `bound`); without it
        the unplaced trainers go first, then the planned ones, then the bound pod on
        the node with the most free room (the largest hole after it leaves).
        """
        self.target -= 1
        self.shrunk = True
        if cause not in self.causes:
            self.causes.append(cause)
        shape = self.shape
        budget.add(shape[0], shape[1], self.view.gpu_limit, -1)
        if victim is None:
            if self.blocked:
                self.blocked -= 1
                self.waiting = min(self.waiting, self.blocked)
                return -1
            if self.planned_nodes:
                room.give(self.planned_nodes.pop(), shape)
                return -1
            if not self.bound:
                return -1
            position = self.largest_hole(room)
        else:
            position = next(i for i, (name, _) in enumerate(self.bound) if name == victim)
        name, node = self.bound.pop(position)
        if name:
            self.victims.append(name)
            self.victim_nodes.append(node)
        if node >= 0:
            room.release(node, shape)
        return node


def build_plans(
    jobs: list[JobView], resources: ClusterResource, max_load_desired: float, room: Room,
    quotas: QuotaBook | None = None,
) -> tuple[Budget, list[JobPlan]]:
    """The budget and one plan per elastic job, sorted by key (the canonical order).

    Requests are counted as they will be once each Job holds its target (leaving
    pods gone, pods not yet created counted). Leaving trainers add to their node's
    coming room.
    """
    budget = Budget(
        cpu=resources.cpu_request_milli,
        gpu=resources.gpu_limit,
        memory=resources.memory_request_mega,
        cpu_cap=load_cap.cpu_cap(resources, max_load_desired),
        gpu_cap=load_cap.gpu_cap(resources),
        memory_cap=resources.memory_total_mega,
    )
    plans: list[JobPlan] = []
    for view in jobs:
        elastic, target = view.elastic, view.clamped()
        budget.cpu += view.cpu_request_milli * (target - view.total)
        budget.memory += view.memory_request_mega * (target - view.total)
        budget.gpu += view.gpu_limit * (target - view.total)
        if elastic:
            shape = room.shape_of(
                view.cpu_request_milli, view.memory_request_mega, view.gpu_request, view.extended
            )
            plan = JobPlan(view, target, bound=_bound(view, room, shape), shape=shape,
                           allowed=room.eligible(view.constraints))
            if quotas is not None:
                leaving = sum(1 for t in view.trainers or () if t.leaving)
                plan.quota = quotas.enrol(view, target - view.total, leaving)
                if plan.quota >= 0:
                    plan.book = quotas
            plans.append(plan)
    plans.sort(key=lambda plan: plan.key)
    return budget, plans


def _bound(view: JobView, room: Room, shape: Shape) -> list[tuple[str, int]]:
    """The view's live trainers on nodes, sorted by name; leaving ones release room."""
    if view.trainers is None:
        return [("", UNKNOWN_NODE)] * (view.total - view.unbound)
    index = room.index.get
    names, nodes, leavings = zip(*view.trainers, strict=True) if view.trainers else ((), (), ())
    if all(nodes) and not any(leavings):  # every one bound and staying: one pass in C
        bound = list(zip(names, map(index, nodes, repeat(UNKNOWN_NODE)), strict=True))
    else:
        bound = [(name, index(node, UNKNOWN_NODE))
                 for name, node, leaving in view.trainers if node and not leaving]
    if len(bound) < len(view.trainers):  # some unbound or leaving: the second look
        for _, node_name, leaving in view.trainers:
            if leaving and node_name and (node := index(node_name, UNKNOWN_NODE)) >= 0:
                room.release(node, shape)
    bound.sort()
    return bound
