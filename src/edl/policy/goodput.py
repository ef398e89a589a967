"""`goodput`: trainers where they speed training up most, with every resize priced.

`default` gives every job the same fair share of trainers; one more trainer is worth
the same to every job. It is not: one job's throughput is flat beyond 8 trainers,
another's scales to 60, and a new trainer costs seconds before it contributes.

`goodput` is `default` with its share step replaced. Everything before it is kept —
pending services get node room first, jobs below min-instance and services make the
most fulfilled jobs shrink (victims chosen), requests stay under max load — and so is
everything after it: growth onto concrete nodes with room (never over-committed),
and jobs above their share giving way to jobs stuck below theirs. Only the shares
differ: instead of water-filling by fulfillment, `marginal.allocate` hands out the
budget by normalised marginal gain per unit of resource, under a fairness floor,
with a payback rule for growth and a cooldown between opposite resizes
(`edl.policy.marginal` has the rules). Both price a resize by the job's own pause as
its runtime measured it (`Scaling.resize_pause_s`, smoothed; a collective job's mode
default until then): a live job pausing 0.2 s is resized freely, a restarting one
pausing 40 s rarely. A job's curve comes from `JobView.scaling`
(fitted online by the Autoscaler, or the job's declared prior); a job without one
is assumed to scale linearly, which makes `goodput` behave like a fair share that
favours jobs with a small min-instance.

A job that adapts its batch (`spec.batch`) and whose gradient noise scale φ has been
measured is sized by *goodput*: its curve becomes the best goodput at each trainer
count (`edl.throughput.batch.GoodputCurve`: throughput at the best total batch times
that batch's statistical efficiency), so its speed-up at n trainers is the best
goodput at n over the best at its minimum, and trainers that would only buy a batch
too large to help are not worth their resources. Each of its decisions carries the
batch for its new trainer count; the batch changes only when the new one is
predicted ``batch_gain`` (5 %) faster than the one it runs (AdaptDL saw batches flap
without such a threshold); a torchrun job takes it when its world next re-forms (a
resize, priced as one), a live or PS job at its next step or task, so a new batch
costs no pause of its own.

Every decision's reason names the goodput share, the fair share and floor it came
from, the job's speed-up, the gain of one more trainer and what ended its growth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from edl.accounting.types import ClusterResource
from edl.policy.base import Decision, JobView, Scaling
from edl.policy.batching import with_batch
from edl.policy.default import DefaultPolicy
from edl.policy.marginal import Allocation, GoodputParams, Want, allocate, trainer_value
from edl.policy.plan_state import Budget, JobPlan
from edl.policy.room import Room
from edl.throughput.batch import FixedBatchCurve, GoodputCurve
from edl.throughput.curve import Curve, UslCurve
from edl.throughput.pause import cooldown_s

__all__ = ["GoodputPolicy"]

_LINEAR = UslCurve(1.0)
_STOPS = {
    "max": "at max-instance",
    "ceiling": "held by a cooldown after a shrink or by what its curve was measured at",
    "budget": "budget used by better gains",
    "no gain": "one more trainer adds no throughput",
    "payback": "one more trainer would not repay its join cost (and the resize's pause) "
    "within the horizon",
    "deadband": "kept its size: the resize would change its throughput less than the deadband",
    "": "",
}


class GoodputPolicy(DefaultPolicy):
    """`default` with goodput shares (see the module doc)."""

    name = "goodput"

    def __init__(self, params: GoodputParams | None = None) -> None:
        self.params = params or GoodputParams()
        self._notes: dict[tuple[str, str], str] = {}
        self._wants: dict[tuple[str, str], Want] = {}
        self._floors: dict[tuple[str, str], int] = {}
        self._budget: tuple[int, int, int] = (1, 1, 1)
        self._caps: tuple[int, int, int] = (1, 1, 1)
        self._early: dict[tuple[str, str], Want] = {}
        self._deferred: set[tuple[str, str]] = set()

    def plan_with_placement(
        self, jobs: Sequence[JobView], resources: ClusterResource, max_load_desired: float
    ) -> tuple[list[Decision], dict[tuple[str, str], list[str]]]:
        self._notes, self._wants, self._floors = {}, {}, {}
        decisions, placement = super().plan_with_placement(jobs, resources, max_load_desired)
        views = {view.key: view for view in jobs}
        return [self._with_batch(d, views.get((d.namespace, d.name))) for d in decisions], placement

    # -- the batch ------------------------------------------------------------------------
    def _goodput_curve(self, view: JobView) -> GoodputCurve | FixedBatchCurve | None:
        """The job's goodput curve, when it adapts its batch and φ has been measured
        (``adapt_batch`` off: the goodput of its declared per-trainer batch)."""
        scaling = view.scaling
        if scaling is None or scaling.batch_limits is None or scaling.noise_scale is None:
            return None
        phi = scaling.noise_scale if self.params.efficiency else None
        if not self.params.adapt_batch:
            return FixedBatchCurve(scaling.curve, scaling.batch_limits, phi)
        return GoodputCurve(scaling.curve, scaling.batch_limits, phi, scaling.compute_rate)

    def _with_batch(self, decision: Decision, view: JobView | None) -> Decision:
        """The decision with the batch for its target (`edl.policy.batching`)."""
        if view is None or view.scaling is None:
            return decision
        want = self._wants.get(view.key) or self._early.get(view.key)
        curve = want.curve if want is not None else self._goodput_curve(view)
        if not isinstance(curve, GoodputCurve):
            return decision
        # a new batch costs no pause: a torchrun job takes it when its world re-forms
        # for a resize (paid for as one), a live or PS job at its next step or task
        return with_batch(decision, curve, view.scaling.batch, self.params.batch_gain)

    # -- the replaced step ----------------------------------------------------------------
    def _fair_shares(self, plans: list[JobPlan], budget: Budget, room: Room) -> None:
        """Step 6 of `default`, by goodput: shares from `marginal.allocate`."""
        super()._fair_shares(plans, budget, room)  # the fair share, input of the floor
        if not plans:
            return
        trainer_cpu = sum(p.target * p.view.cpu_request_milli for p in plans)
        trainer_memory = sum(p.target * p.view.memory_request_mega for p in plans)
        trainer_gpu = sum(p.target * p.view.gpu_limit for p in plans)
        trainer_budget = (  # what trainers may use under max load, as shares.py counts it
            budget.cpu_cap - (budget.cpu - trainer_cpu),
            budget.memory_cap - (budget.memory - trainer_memory),
            budget.gpu_cap - (budget.gpu - trainer_gpu),
        )
        wants = [self._want(plan) for plan in plans]
        self._wants = {want.key: want for want in wants}
        self._budget = trainer_budget
        allocations = allocate(wants, trainer_budget, self.params)
        for plan, want, allocation in zip(plans, wants, allocations, strict=True):
            self._notes[want.key] = self._explain(plan, want, allocation)
            self._floors[want.key] = allocation.floor
            plan.share = allocation.target

    def _begin(self, plans: list[JobPlan], budget: Budget) -> None:
        self._caps = (budget.cpu_cap, budget.memory_cap, budget.gpu_cap)
        self._deferred = set()
        self._early = {}

    def _grow(self, plans: list[JobPlan], budget: Budget, room: Room) -> None:
        """`default`'s growth, then the deadband on what was really given: a growth cut
        short by room (more is on its way, or will be made by rebalancing) that adds
        under ``deadband`` of the job's throughput waits to be made in one step, unless
        the job is below its floor. Each partial step is a resize of its own."""
        before = {plan.key: plan.target for plan in plans}
        super()._grow(plans, budget, room)
        band = self.params.deadband
        for plan in plans:
            old, want = before[plan.key], self._wants.get(plan.key)
            added = plan.target - old
            if added <= 0 or want is None or plan.stopped != "room":
                continue
            if old < self._floors.get(plan.key, 0) or plan.target >= plan.share:
                continue
            now = want.curve.rate(old)
            if now <= 0 or want.curve.rate(plan.target) - now >= band * now:
                continue
            view, shape = plan.view, plan.shape
            for _ in range(added):
                room.give(plan.planned_nodes.pop(), shape)
                if plan.book is not None:
                    plan.book.give(plan.quota)  # nor is its quota taken
            budget.add(view.cpu_request_milli, view.memory_request_mega, view.gpu_limit, -added)
            plan.target = old
            plan.grown = False
            self._deferred.add(plan.key)

    def _shed_cost(self, plan: JobPlan, count: int) -> float:
        """Room for services and jobs below min comes from the trainers worth least:
        a flat job's surplus before a small job's few (fulfillment would pick the
        small job: it is the most fulfilled)."""
        want = self._early.get(plan.view.key)
        if want is None:
            want = self._early[plan.view.key] = self._want(plan)
        return trainer_value(want, count, self._caps, self.params)

    def _level(self, plan: JobPlan, count: int) -> float:
        """Rebalancing by marginal value: a donor gives a trainer only while the last
        trainer it keeps is worth no more than the one the taker gains (fulfillment
        would keep a flat job's useless trainers). Negated: a higher level is a job
        better served. A trainer the job holds is worth ``1 + incumbency`` times more, so
        a move must gain that margin; under fixed curves the move back never pays. -inf
        (never a donor there): at or below its floor, or below the goodput share of a
        job holding more than it."""
        want = self._wants.get(plan.view.key)
        if want is None:
            return plan.fulfillment(count)
        if count <= self._floors.get(want.key, 0):
            return -math.inf  # below its floor (fairness, cooldown): not a donor
        if count < min(plan.share, plan.target):
            # Below the goodput share it holds more than: not a donor either. The share
            # is where the allocation, its deadband and its cooldowns left the job; a
            # donor taken under it gave a trainer or two every cooldown (each a resize
            # that moved its speed by a few per cent).
            return -math.inf
        value = trainer_value(want, count, self._budget, self.params)
        if count <= want.held:  # a trainer it holds: moving it is not free
            value *= 1.0 + self.params.incumbency
        return -value

    def _want(self, plan: JobPlan) -> Want:
        view: JobView = plan.view
        scaling = view.scaling
        cooldown = self._cooldown(scaling)
        curve: Curve = scaling.curve if scaling is not None else _LINEAR
        goodput = self._goodput_curve(view)
        if goodput is not None:
            curve = goodput
        return Want(
            key=view.key,
            min_instance=view.min_instance,
            max_instance=view.max_instance,
            current=plan.target,
            held=max(view.parallelism, plan.target),
            unit=(view.cpu_request_milli, view.memory_request_mega, view.gpu_limit),
            curve=curve,
            fair=plan.share,
            join_cost_s=scaling.join_cost_s if scaling is not None else 0.0,
            resize_pause_s=scaling.resize_pause_s if scaling is not None else 0.0,
            remaining_samples=scaling.remaining_samples if scaling is not None else None,
            grown_recently=scaling is not None
            and scaling.since_grow_s is not None
            and scaling.since_grow_s < cooldown,
            shrunk_recently=scaling is not None
            and scaling.since_shrink_s is not None
            and scaling.since_shrink_s < cooldown,
        )

    def _cooldown(self, scaling: Scaling | None) -> float:
        """Seconds a job is left alone after a resize: from its resize pause when one is
        known (a live job's pause of 0.2 s needs no 120 s of calm), else ``cooldown_s``."""
        params = self.params
        if scaling is None or not scaling.pause_source:
            return params.cooldown_s
        return cooldown_s(scaling.resize_pause_s, params.pause_share, params.min_cooldown_s,
                          params.cooldown_s)

    @staticmethod
    def _explain(plan: JobPlan, want: Want, allocation: Allocation) -> str:
        curve, low = want.curve, want.min_instance
        base = curve.rate(low)
        share = allocation.target

        def speedup(n: int) -> float:
            return curve.rate(n) / base if base > 0 else 0.0

        source = plan.view.scaling.source if plan.view.scaling is not None else "none"
        parts = [
            f"goodput share {share} (fair share {want.fair}, floor {allocation.floor}"
            + (f", ceiling {allocation.ceiling}" if allocation.ceiling < want.max_instance else "")
            + ")",
            f"speed-up x{speedup(share):.2f} over min {low}",
        ]
        if share < want.max_instance:
            parts.append(f"+1 trainer: +{speedup(share + 1) - speedup(share):.3f}")
        if want.grown_recently:
            parts.append("grown within the cooldown: keeps its trainers")
        if allocation.stop and allocation.stop != "max":
            parts.append(_STOPS[allocation.stop])
        if want.resize_pause_s > 0:
            parts.append(f"resize pause {want.resize_pause_s:.2g} s")
        parts.append(f"curve: {curve.describe()} ({source})")
        return "; ".join(parts)

    # -- explanation ----------------------------------------------------------------------
    def _reason(self, plan: JobPlan) -> str:
        text = super()._reason(plan).replace("fair share", "goodput share")
        note = self._notes.get(plan.view.key)
        if plan.view.key in self._deferred:
            deferred = "the room free now would add under the deadband: it grows in one step"
            note = f"{note}; {deferred}" if note else deferred
        return f"{text} | {note}" if note else text
