"""`default`: edl's scaling policy — fair, node-aware, and quick to give room back.

One plan, in order (every step pure arithmetic on copies of the inputs):

1. Targets start at the current parallelism, clamped to [min, max].
2. Pending pods that are not trainers (a service scaling up, a new job's
   pserver) get node room first: they are placed first-fit on a copy of the
   per-node room. Those that fit nowhere are a *deficit*.
3. Each job's trainers that hold no node yet (unscheduled pending pods and pods
   the Job has not created) are placed, least fulfilled job first. Pending pods
   already bound to a node are not placed twice (`JobView.unscheduled`). Trainers
   that fit nowhere make the job *blocked*; a job that cannot hold its
   min-instance this way is *starving*.
4. While CPU requests or GPU limits exceed max_load_desired of the total (pending
   pods included, as in the original), the most fulfilled jobs above min shrink.
5. For the deficit and the starving jobs, the most fulfilled jobs above min
   shrink until the trainers they give up make room for them: a removed trainer
   frees room for as many waiting pods as fit in its own requests, counting
   only the resources some node lacks (Kubernetes picks which pod goes, so its
   node is unknown); trainers already terminating count first.
6. Fair shares: the CPU/GPU budget left under max_load_desired (and the memory
   total) is water-filled over all jobs by fulfillment (`fairshare.py`).
7. Growth: jobs below their fair share that were not shrunk and have no blocked
   trainers grow one trainer at a time, least fulfilled first, each trainer
   placed on a concrete node with room and within the aggregate budget.
8. Rebalance: when jobs stay below their fair share because nothing fits, jobs
   above their fair share shrink toward it (never below) until the deficit is
   covered; the growth happens in a later plan, once the room is really free.

Guarantees (property-tested): targets stay in [min, max]; every added trainer
was placed on a node with room and no node is over-committed; CPU requests stay
within max_load_desired of the total unless they already exceeded it; no job
grows and shrinks in one plan; the same input gives the same plan.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from edl.accounting.types import ClusterResource, Nodes
from edl.policy.base import Decision, JobView
from edl.policy.fairshare import Demand, fair_shares

__all__ = ["DefaultPolicy"]


class _Room:
    """Per-node room as parallel lists, with a first-fit cursor per trainer shape."""

    __slots__ = ("count", "cpu", "cursor", "gpu", "memory", "names")

    def __init__(self, nodes: Nodes) -> None:
        self.names = names = list(nodes.cpu_idle_milli)
        self.count = len(names)
        self.cpu = list(nodes.cpu_idle_milli.values())
        self.memory = [nodes.memory_free_mega.get(name, 0) for name in names]
        self.gpu = [nodes.gpu_free.get(name, 0) for name in names]
        # Room only shrinks between two `give` calls, so a node too small for a shape
        # stays too small and each shape's cursor only moves forward.
        self.cursor: dict[tuple[int, int, int], int] = {}

    def take(self, cpu: int, memory: int, gpu: int) -> int:
        """Take room for one pod on the first node where it fits; its index, or -1."""
        shape = (cpu, memory, gpu)
        index = self.cursor.get(shape, 0)
        node_cpu, node_memory, node_gpu, count = self.cpu, self.memory, self.gpu, self.count
        while index < count:
            if node_cpu[index] >= cpu and node_memory[index] >= memory and node_gpu[index] >= gpu:
                node_cpu[index] -= cpu
                node_memory[index] -= memory
                node_gpu[index] -= gpu
                self.cursor[shape] = index
                return index
            index += 1
        self.cursor[shape] = count
        return -1

    def give(self, index: int, cpu: int, memory: int, gpu: int) -> None:
        """Return room taken by `take` (a planned trainer that is dropped again)."""
        self.cpu[index] += cpu
        self.memory[index] += memory
        self.gpu[index] += gpu
        self.cursor.clear()


@dataclass(slots=True)
class _Budget:
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

    def add(self, cpu: int, memory: int, gpu: int, count: int) -> None:
        self.cpu += cpu * count
        self.memory += memory * count
        self.gpu += gpu * count


@dataclass(slots=True)
class _Job:
    """The plan of one elastic job while it is being made."""

    view: JobView
    target: int
    placed: int = 0  # trainers already holding node room that the target keeps
    planned_nodes: list[int] = field(default_factory=list)  # room taken in this plan
    blocked: int = 0  # unscheduled trainers that fit no node
    stopped: str = ""  # why growth stopped below the fair share: "room" or "load"
    share: int = 0
    shrunk: bool = False
    grown: bool = False
    causes: list[str] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, int, int]:
        view = self.view
        return view.cpu_request_milli, view.memory_request_mega, view.gpu_request

    def fulfillment(self) -> float:
        view = self.view
        return (self.target - view.min_instance) / (view.max_instance - view.min_instance)

    def holding(self) -> int:
        """Trainers that hold (or were given) node room."""
        return self.placed + len(self.planned_nodes)


def _most_fulfilled(jobs: Sequence[_Job]) -> list[tuple[float, str, str, int]]:
    heap = [
        (-job.fulfillment(), job.view.namespace, job.view.name, index)
        for index, job in enumerate(jobs)
        if job.target > job.view.min_instance
    ]
    heapq.heapify(heap)
    return heap


class _Waiting:
    """Pods (or starving trainers) waiting for room, and how removed trainers serve them."""

    __slots__ = ("items", "least", "pool")

    def __init__(self, shapes: list[tuple[int, int, int]], least: tuple[int, int, int]) -> None:
        self.items: list[list] = []  # [needed part of the shape, count], in order of arrival
        self.pool = [0, 0, 0]  # room from trainers smaller than the first pod
        self.least = least  # every node has at least this much room left
        for shape in shapes:
            self.add(shape, 1)

    def add(self, shape: tuple[int, int, int], count: int) -> None:
        """Wait for `count` pods of `shape`; only resources some node lacks are counted."""
        if count <= 0:
            return
        shape = tuple(amount if amount > self.least[d] else 0 for d, amount in enumerate(shape))
        if shape == (0, 0, 0):
            return  # fits on every node: nothing to make room for
        if self.items and self.items[-1][0] == shape:
            self.items[-1][1] += count
        else:
            self.items.append([shape, count])

    def __bool__(self) -> bool:
        return bool(self.items)

    def helped_by(self, trainer: tuple[int, int, int]) -> bool:
        """A trainer helps the first waiting pod if it holds every resource the pod needs."""
        pod = self.items[0][0]
        return all(trainer[d] > 0 for d in range(3) if pod[d] > 0)

    def drop_first(self) -> None:
        """Give up on the first waiting pod (no trainer can make room for it)."""
        self.items.pop(0)
        self.pool = [0, 0, 0]

    def credit(self, trainer: tuple[int, int, int]) -> None:
        """Count the room one removed trainer makes against the waiting pods."""
        if not self.items:
            return
        pod, count = self.items[0]
        # the trainer's node has at least `least` room besides what the trainer frees
        least = self.least
        slots = min(
            ((trainer[d] + max(0, least[d])) // pod[d] for d in range(3) if pod[d] > 0),
            default=count,
        )
        if slots >= 1:
            self.items[0][1] -= slots
        else:
            for d in range(3):
                self.pool[d] += trainer[d]
            if all(self.pool[d] >= pod[d] for d in range(3)):
                self.pool = [self.pool[d] - pod[d] for d in range(3)]
                self.items[0][1] -= 1
        if self.items[0][1] <= 0:
            self.items.pop(0)
            self.pool = [0, 0, 0]


class _VictimOrder:
    """Which nodes a shrinking job should give its trainers up on, best first.

    Kubernetes' Job controller removes the newest pods, wherever they run; under a
    spreading scheduler the freed room then lies in holes smaller than any waiting
    pod. Preferred instead: nodes where the trainer's room plus the node's idle room
    fits a pod that waits (a pending service pod, or a trainer of a job the plan
    could not place), then the least allocated nodes, so freed room pools where it
    is already largest. One ordering per trainer shape, computed on first use.
    """

    __slots__ = ("_deficit", "_idle", "_nodes", "_orders", "_plans", "_waiting")

    def __init__(
        self, nodes: Nodes, deficit: list[tuple[int, int, int]], plans: Sequence[_Job]
    ) -> None:
        # Most plans shrink nothing: keep the inputs, do the work on first use.
        self._nodes, self._deficit, self._plans = nodes, deficit, plans
        self._orders: dict[tuple[int, int, int], tuple[str, ...]] = {}

    def for_shape(self, shape: tuple[int, int, int]) -> tuple[str, ...]:
        order = self._orders.get(shape)
        if order is None:
            if not self._orders:
                nodes = self._nodes
                self._idle = [
                    (
                        nodes.cpu_idle_milli[name],
                        nodes.memory_free_mega.get(name, 0),
                        nodes.gpu_free.get(name, 0),
                        name,
                    )
                    for name in nodes.cpu_idle_milli
                ]
                waiting = set(self._deficit)
                waiting.update(p.shape for p in self._plans if p.blocked or p.stopped == "room")
                self._waiting = sorted(waiting)
            cpu, memory, gpu = shape
            waiting = self._waiting

            def rank(node: tuple[int, int, int, str]) -> tuple[bool, int, int, str]:
                free = (node[0] + cpu, node[1] + memory, node[2] + gpu)
                opens = any(
                    free[0] >= w[0] and free[1] >= w[1] and free[2] >= w[2] for w in waiting
                )
                return (not opens, -node[0], -node[1], node[3])

            order = self._orders[shape] = tuple(node[3] for node in sorted(self._idle, key=rank))
        return order


class DefaultPolicy:
    """edl's policy (see the module doc for the steps and their guarantees).

    `goodput` (edl.policy.goodput) subclasses it and replaces two steps, `_fair_shares`
    and `_reason`: keep both called through ``self``.
    """

    name = "default"

    def plan(
        self, jobs: Sequence[JobView], resources: ClusterResource, max_load_desired: float
    ) -> list[Decision]:
        return self.plan_with_placement(jobs, resources, max_load_desired)[0]

    def plan_with_placement(
        self, jobs: Sequence[JobView], resources: ClusterResource, max_load_desired: float
    ) -> tuple[list[Decision], dict[tuple[str, str], list[str]]]:
        """The plan, and for each job the nodes its not-yet-scheduled trainers were given.

        The placement is the policy's proof that the plan fits; the scheduler is free
        to place the pods elsewhere.
        """
        budget = _Budget(
            cpu=resources.cpu_request_milli,
            gpu=resources.gpu_limit,
            memory=resources.memory_request_mega,
            cpu_cap=int(resources.cpu_total_milli * max_load_desired),
            gpu_cap=int(resources.gpu_total * max_load_desired),
            memory_cap=resources.memory_total_mega,
        )
        plans: list[_Job] = []
        for view in jobs:
            elastic = view.min_instance < view.max_instance
            target = (
                min(max(view.parallelism, view.min_instance), view.max_instance)
                if elastic
                else view.parallelism
            )
            # Requests as they will be once the Job holds `target` pods (terminating
            # pods gone, pods not yet created counted).
            budget.cpu += view.cpu_request_milli * (target - view.total)
            budget.memory += view.memory_request_mega * (target - view.total)
            budget.gpu += view.gpu_limit * (target - view.total)
            if elastic:
                plans.append(_Job(view, target))
        # Every step walks the plans in one canonical order, so the plan does not depend
        # on the order the caller lists the jobs in (e.g. which starving job waits first).
        plans.sort(key=lambda plan: plan.view.key)
        room = _Room(resources.nodes)

        deficit = self._place_pending_pods(resources, room)
        self._place_unscheduled_trainers(plans, room)
        vacated = self._shrink_over_max_load(plans, budget, room, max_load_desired)
        self._make_room(plans, budget, room, deficit, vacated)
        self._fair_shares(plans, budget)
        self._grow(plans, budget, room)
        self._rebalance(plans, budget, room)

        by_key = {plan.view.key: plan for plan in plans}
        placement = {plan.view.key: [room.names[i] for i in plan.planned_nodes] for plan in plans}
        victims = _VictimOrder(resources.nodes, deficit, plans)
        decisions = []
        for view in jobs:
            plan = by_key.get(view.key)
            if plan is None:
                reason, target = "not elastic (min-instance = max-instance)", view.parallelism
            else:
                reason, target = self._reason(plan), plan.target
            nodes = victims.for_shape(plan.shape) if plan and target < view.parallelism else ()
            decisions.append(
                Decision(view.namespace, view.name, view.parallelism, target, reason, nodes)
            )
        return decisions, placement

    # -- steps ------------------------------------------------------------------------

    @staticmethod
    def _place_pending_pods(resources: ClusterResource, room: _Room) -> list[tuple[int, int, int]]:
        """Step 2: reserve room for pending non-trainer pods; returns those that fit nowhere."""
        deficit = []
        pods = sorted(
            resources.pending,
            key=lambda p: (-p.gpu_request, -p.cpu_request_milli, -p.memory_request_mega),
        )
        for pod in pods:
            shape = (pod.cpu_request_milli, pod.memory_request_mega, pod.gpu_request)
            if room.take(*shape) < 0:
                deficit.append(shape)
        return deficit

    @staticmethod
    def _place_unscheduled_trainers(plans: list[_Job], room: _Room) -> None:
        """Step 3: give node room to trainers that have none yet, least fulfilled first."""

        def order(plan: _Job) -> tuple[float, str, str]:
            view = plan.view
            bound = view.total - view.unbound
            held = (bound - view.min_instance) / (view.max_instance - view.min_instance)
            return (held, view.namespace, view.name)

        for plan in sorted(plans, key=order):
            view = plan.view
            plan.placed = min(view.total - view.unbound, plan.target)
            cpu, memory, gpu = plan.shape
            for _ in range(plan.target - plan.placed):
                node = room.take(cpu, memory, gpu)
                if node < 0:
                    plan.blocked = plan.target - plan.holding()
                    break
                plan.planned_nodes.append(node)

    @staticmethod
    def _shrink_one(plan: _Job, budget: _Budget, room: _Room, cause: str) -> bool:
        """Drop one trainer; True when it frees room on a node (a bound trainer goes)."""
        plan.target -= 1
        plan.shrunk = True
        if cause not in plan.causes:
            plan.causes.append(cause)
        cpu, memory, gpu = plan.shape
        budget.add(cpu, memory, plan.view.gpu_limit, -1)
        # Kubernetes removes pods that are not yet scheduled first.
        if plan.blocked:
            plan.blocked -= 1
            return False
        if plan.planned_nodes:
            room.give(plan.planned_nodes.pop(), cpu, memory, gpu)
            return False
        plan.placed = min(plan.placed, plan.target)
        return True

    def _shrink_over_max_load(
        self, plans: list[_Job], budget: _Budget, room: _Room, max_load: float
    ) -> list[tuple[int, int, int]]:
        """Step 4: shrink the most fulfilled jobs while requests exceed max load."""
        vacated: list[tuple[int, int, int]] = []
        heap = _most_fulfilled(plans)
        while heap and (budget.cpu > budget.cpu_cap or budget.gpu > budget.gpu_cap):
            _, _, _, index = heapq.heappop(heap)
            plan = plans[index]
            cpu = plan.view.cpu_request_milli
            if not (
                (budget.cpu > budget.cpu_cap and cpu > 0)
                or (budget.gpu > budget.gpu_cap and plan.view.gpu_limit > 0)
            ):
                continue  # shrinking this job would not lower what is over
            what = "CPU requests" if budget.cpu > budget.cpu_cap else "GPU limits"
            cause = f"{what} above {max_load:.0%} of the cluster"
            if self._shrink_one(plan, budget, room, cause):
                vacated.append(plan.shape)
            if plan.target > plan.view.min_instance:
                heapq.heappush(heap, (-plan.fulfillment(), *plan.view.key, index))
        return vacated

    def _make_room(
        self,
        plans: list[_Job],
        budget: _Budget,
        room: _Room,
        deficit: list[tuple[int, int, int]],
        vacated: list[tuple[int, int, int]],
    ) -> None:
        """Step 5: shrink the most fulfilled jobs for pending pods and starving jobs.

        Which node a removed trainer frees is Kubernetes' choice, so room is counted
        in *slots*: a removed trainer at least makes room on its node for as many
        waiting pods as fit in the trainer's own requests (trainers smaller than the
        pod add up instead). Trainers already on their way out (removed by step 4, or
        bound beyond parallelism, i.e. terminating) count first, so a plan does not
        shed again what the previous plan already shed.
        """
        starving = [p for p in plans if p.holding() < p.view.min_instance]
        if not starving and not deficit:
            return
        # a resource every node has enough of for a pod is not what it waits for
        least = (min(room.cpu, default=0), min(room.memory, default=0), min(room.gpu, default=0))
        waiting = _Waiting(deficit, least)
        for plan in starving:
            waiting.add(plan.shape, plan.view.min_instance - plan.holding())
        for shape in vacated:
            waiting.credit(shape)
        for plan in plans:
            view = plan.view
            for _ in range(max(0, (view.total - view.unbound) - view.parallelism)):
                waiting.credit(plan.shape)
        parts = []
        if deficit:
            parts.append(f"{len(deficit)} pending pods that are not trainers")
        if starving:
            names = ", ".join(p.view.name for p in starving[:3])
            more = f" and {len(starving) - 3} more" if len(starving) > 3 else ""
            parts.append(f"jobs below min-instance ({names}{more})")
        cause = "make room for " + " and ".join(parts)
        starving_keys = {p.view.key for p in starving}
        heap = [entry for entry in _most_fulfilled(plans) if entry[1:3] not in starving_keys]
        heapq.heapify(heap)
        useless: list[tuple[float, str, str, int]] = []  # cannot help the first waiting pod
        while waiting and (heap or useless):
            if not heap:  # nobody can help the first waiting pod: leave it, go on
                waiting.drop_first()
                for entry in useless:
                    heapq.heappush(heap, entry)
                useless.clear()
                continue
            entry = heapq.heappop(heap)
            plan = plans[entry[3]]
            if not waiting.helped_by(plan.shape):
                useless.append(entry)
                continue
            waiting_before = len(waiting.items)
            if self._shrink_one(plan, budget, room, cause):
                waiting.credit(plan.shape)
            if plan.target > plan.view.min_instance:
                heapq.heappush(heap, (-plan.fulfillment(), *plan.view.key, entry[3]))
            if len(waiting.items) != waiting_before:  # a new first waiting pod
                for entry in useless:
                    heapq.heappush(heap, entry)
                useless.clear()

    @staticmethod
    def _fair_shares(plans: list[_Job], budget: _Budget) -> None:
        """Step 6: each job's fair share of what trainers may use under max load."""
        trainer_cpu = sum(p.target * p.view.cpu_request_milli for p in plans)
        trainer_memory = sum(p.target * p.view.memory_request_mega for p in plans)
        trainer_gpu = sum(p.target * p.view.gpu_limit for p in plans)
        ordered = sorted(range(len(plans)), key=lambda i: plans[i].view.key)
        shares = fair_shares(
            [
                Demand(
                    plans[i].view.min_instance,
                    plans[i].view.max_instance,
                    plans[i].view.cpu_request_milli,
                    plans[i].view.memory_request_mega,
                    plans[i].view.gpu_limit,
                )
                for i in ordered
            ],
            cpu=budget.cpu_cap - (budget.cpu - trainer_cpu),
            memory=budget.memory_cap - (budget.memory - trainer_memory),
            gpu=budget.gpu_cap - (budget.gpu - trainer_gpu),
        )
        for i, share in zip(ordered, shares, strict=True):
            plans[i].share = share

    @staticmethod
    def _grow(plans: list[_Job], budget: _Budget, room: _Room) -> None:
        """Step 7: water-fill free node room up to the fair shares, one trainer at a time."""
        heap = [
            (plan.fulfillment(), *plan.view.key, index)
            for index, plan in enumerate(plans)
            if not plan.shrunk and not plan.blocked and plan.target < plan.share
        ]
        heapq.heapify(heap)
        while heap:
            _, namespace, name, index = heapq.heappop(heap)
            plan = plans[index]
            cpu, memory, gpu = plan.shape
            gpu_limit = plan.view.gpu_limit
            low = plan.view.min_instance
            span = plan.view.max_instance - low
            # Give this job units until it passes the next least fulfilled job (one heap
            # operation per batch instead of per trainer; same result as one at a time).
            rival = heap[0] if heap else None
            while True:
                if not budget.fits(cpu, memory, gpu_limit):
                    plan.stopped = "load"
                    break
                node = room.take(cpu, memory, gpu)
                if node < 0:
                    plan.stopped = "room"
                    break
                plan.planned_nodes.append(node)
                plan.target += 1
                plan.grown = True
                budget.add(cpu, memory, gpu_limit, 1)
                if plan.target >= plan.share:
                    break
                level = (plan.target - low) / span
                if rival is not None and (level, namespace, name) > rival[:3]:
                    heapq.heappush(heap, (level, namespace, name, index))
                    break

    def _rebalance(self, plans: list[_Job], budget: _Budget, room: _Room) -> None:
        """Step 8: jobs above their share give trainers to jobs stuck below theirs."""
        need = [0, 0, 0]
        for plan in plans:
            if not plan.shrunk and plan.target < plan.share:
                missing = plan.share - plan.target
                cpu, memory, gpu = plan.shape
                need[0] += cpu * missing
                need[1] += memory * missing
                need[2] += gpu * missing
        if need == [0, 0, 0]:
            return
        heap = [
            (-plan.fulfillment(), *plan.view.key, index)
            for index, plan in enumerate(plans)
            if not plan.grown and plan.target > max(plan.share, plan.view.min_instance)
        ]
        heapq.heapify(heap)
        given = [0, 0, 0]
        while heap and any(given[d] < need[d] for d in range(3)):
            _, _, _, index = heapq.heappop(heap)
            plan = plans[index]
            shape = plan.shape
            if not any(shape[d] > 0 and given[d] < need[d] for d in range(3)):
                continue
            cause = f"give capacity to jobs below their fair share (this job's share: {plan.share})"
            self._shrink_one(plan, budget, room, cause)
            for d in range(3):
                given[d] += shape[d]
            if plan.target > max(plan.share, plan.view.min_instance):
                heapq.heappush(heap, (-plan.fulfillment(), *plan.view.key, index))

    # -- explanation ------------------------------------------------------------------

    @staticmethod
    def _reason(plan: _Job) -> str:
        view = plan.view
        before, after = view.parallelism, plan.target
        if after < before or (plan.shrunk and plan.causes):
            text = f"shrink {before}->{after}: " + "; ".join(plan.causes or ["above max-instance"])
            return text
        if after > before:
            text = f"grow {before}->{after}: "
            if before < view.min_instance and not plan.grown:
                if plan.holding() < view.min_instance:
                    return text + "up to min-instance; waiting for room on a node"
                return text + "up to min-instance"
            text += f"placed on nodes with free room (fair share {plan.share})"
            if plan.stopped == "room":
                text += "; no node has room for more"
            elif plan.stopped == "load":
                text += "; CPU/GPU requests reached max load"
            return text
        if plan.holding() < view.min_instance:
            return (
                f"keep {after}: only {plan.holding()} of min-instance {view.min_instance} "
                "trainers fit; waiting for room to be freed"
            )
        if after >= view.max_instance:
            return f"keep {after}: at max-instance"
        if plan.blocked > 0:
            return f"keep {after}: {plan.blocked} pending trainers fit no node yet"
        if plan.stopped == "room":
            return f"keep {after}: no node has room for another trainer (fair share {plan.share})"
        if plan.stopped == "load":
            return f"keep {after}: CPU/GPU requests at max load (fair share {plan.share})"
        if after > plan.share:
            return f"keep {after}: above its fair share ({plan.share}); no job waits for the room"
        if after == plan.share:
            return f"keep {after}: at its fair share ({plan.share})"
        return f"keep {after}: waiting for room (fair share {plan.share})"
