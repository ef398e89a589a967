"""`default`: edl's scaling policy — fair, placement-aware, and quick to give room back.

The plan models every node (`room.Room`: free room, and room on its way from
leaving trainers) and where each job's trainers run (`JobView.trainers`). In order:

1. Targets start at the current parallelism, clamped to [min, max].
2. Pending pods that are not trainers (a service scaling up, a new job's pserver)
   get free room first, first-fit; those that fit nowhere wait.
3. Each job's trainers that hold no room yet are placed, least fulfilled job
   first; those that fit nowhere leave the job *blocked*; a job that cannot hold
   its min-instance this way is *starving*.
4. While CPU requests exceed max_load_desired of the total or GPU limits the total
   (`load_cap.py`; pending pods included, as in the original), the most fulfilled
   jobs above min shrink (`_shed_cost`: the cheapest trainer first).
5. Make room (`steps.make_room`, `preempt.py`): for each waiting pod and each
   missing trainer of a starving job, the node where the fewest, least costly
   trainers must go for it to fit — room already on its way first, victims from
   jobs above min, most fulfilled cheapest, and only trainers holding something
   the pod lacks on that node. The victims are named (`Decision.victims`).
6. Fair shares (`shares.py`): water-filled by fulfillment over the budget under
   max load and over per-shape pools, so a share counts only room the job's
   trainer shape can use.
7. Growth: jobs below their share that were not shrunk and are not blocked grow
   one trainer at a time onto concrete nodes with free room (`Decision.placement`).
8. Rebalance: a job stuck below its share (a pending trainer, or growth with no
   room) is a waiting pod for the same preemption search, with victims only from
   jobs above their share that stay at or above it; it grows in a later plan,
   once the room is really free.
9. Constraints (`choosy.py`): jobs of one namespace quota give quota to those below
   their share; a wide job's trainers leave the only nodes a narrow job below its
   share can use when free room elsewhere is held for them; growth prefers nodes no
   narrower job wants; above min, trainers that fit nowhere leave the target.
   A job the load cap stops says so (`load_cap.note_load_cap`).

Guarantees (property-tested): targets stay in [min, max]; every added trainer
was placed on a node with room and no node is over-committed; CPU requests stay
within max_load_desired of the total unless they already exceeded it; no job
grows and shrinks in one plan; every named victim held room its waiter lacked;
the same input gives the same plan.
"""

from __future__ import annotations

from collections.abc import Sequence

from edl.accounting.types import ClusterResource
from edl.policy.base import Decision, JobView
from edl.policy.choosy import (
    drop_unplaceable,
    prefer_uncontested,
    rebalance_quota,
    relocate,
)
from edl.policy.load_cap import note_load_cap
from edl.policy.plan_state import Budget, JobPlan, build_plans
from edl.policy.preempt import Preemptor
from edl.policy.quotas import QuotaBook
from edl.policy.reasons import reason
from edl.policy.room import Room, extra_dimensions
from edl.policy.shares import assign_fair_shares
from edl.policy.steps import (
    grow,
    make_room,
    place_pending_pods,
    place_unscheduled_trainers,
    rebalance,
    shrink_over_max_load,
    shrink_over_quota,
)
from edl.policy.topology import apply_topology

__all__ = ["DefaultPolicy"]


class DefaultPolicy:
    """edl's policy (see the module doc for the steps and their guarantees).

    `goodput` (edl.policy.goodput) subclasses it and replaces `_begin`, `_shed_cost`,
    `_fair_shares`, `_grow`, `_level` and `_reason`: keep them called through ``self``.
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

        The placement is the policy's proof that the plan fits; the new trainers' nodes
        go out in `Decision.placement`, which edl's trainer controller makes their
        preferred nodes (`edl.control.placement`; the scheduler may still go elsewhere).
        """
        extra = extra_dimensions(
            resources.nodes, [v.extended for v in jobs] + [p.extended for p in resources.pending]
        )
        room = Room(resources.nodes, extra)
        quotas = QuotaBook(resources.quotas) if resources.quotas else None
        # Every step walks the plans in one canonical order (by key), so the plan does
        # not depend on the order the caller lists the jobs in.
        budget, plans = build_plans(list(jobs), resources, max_load_desired, room, quotas)
        apply_topology(plans, room)
        masks = prefer_uncontested(plans, room)
        self._begin(plans, budget)
        deficit = place_pending_pods(resources, room)
        place_unscheduled_trainers(plans, room)
        shrink_over_quota(plans, budget, room)
        shrink_over_max_load(plans, budget, room, max_load_desired, self._shed_cost)
        # one index of who runs where, built on first use and kept true by its users
        preemptor = Preemptor(room, plans)
        make_room(plans, budget, room, deficit, preemptor, self._shed_cost)
        relocate(plans, budget, room, preemptor, masks)  # shares unset: jobs below min only
        self._fair_shares(plans, budget, room)
        self._grow(plans, budget, room)
        rebalance(plans, budget, room, preemptor, self._level)
        rebalance_quota(plans, budget, room, self._level)
        relocate(plans, budget, room, preemptor, masks)
        drop_unplaceable(plans, budget, room)
        note_load_cap(plans, budget, room)

        by_key = {plan.key: plan for plan in plans}
        name_of = room.names.__getitem__
        placement = {plan.key: list(map(name_of, plan.planned_nodes)) for plan in plans}
        decisions = []
        for view in jobs:
            plan = by_key.get(view.key)
            if plan is None:
                decisions.append(Decision(view.namespace, view.name, view.parallelism,
                                          view.clamped(), view.fixed_reason()))
                continue
            shrinking = plan.target < view.parallelism
            nodes = [room.names[n] for n in plan.victim_nodes if n >= 0] if shrinking else []
            # the trainers the Job will create are the last ones the plan gave room to
            # (growth comes after the room of trainers that exist but are unscheduled)
            new = plan.target - view.parallelism
            decisions.append(
                Decision(
                    view.namespace,
                    view.name,
                    view.parallelism,
                    plan.target,
                    self._reason(plan),
                    victim_nodes=tuple(dict.fromkeys(nodes)) if shrinking else (),
                    victims=tuple(plan.victims) if shrinking else (),
                    placement=tuple(placement[plan.key][-new:]) if new > 0 else (),
                )
            )
        return decisions, placement

    # The steps `goodput` replaces (called through ``self`` for that reason).
    def _begin(self, plans: list[JobPlan], budget: Budget) -> None:
        """Called once the plans are built, before any step."""

    def _shed_cost(self, plan: JobPlan, count: int) -> float:
        """What losing its ``count``-th trainer costs a job when room must be made."""
        return 1.0 - plan.fulfillment(count)

    def _level(self, plan: JobPlan, count: int) -> float:
        """How well served a job is at ``count`` trainers, for rebalancing: fulfillment."""
        return plan.fulfillment(count)

    def _grow(self, plans: list[JobPlan], budget: Budget, room: Room) -> None:
        grow(plans, budget, room)

    def _fair_shares(self, plans: list[JobPlan], budget: Budget, room: Room) -> None:
        assign_fair_shares(plans, budget, room)

    def _reason(self, plan: JobPlan) -> str:
        return reason(plan)
