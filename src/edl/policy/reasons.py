"""Why `default` decided what it did: one sentence per job, from its finished plan."""

from __future__ import annotations

from edl.policy.plan_state import JobPlan

__all__ = ["LOAD_CAP", "no_room", "reason"]

# what binds when `stopped == "load"` (policy/load_cap.py: only CPU has load headroom)
LOAD_CAP = "the load cap (cluster CPU requests at max_load_desired)"


def _narrowed(plan: JobPlan) -> str:
    """What narrows the nodes a job may use: ` matching zone=a`, ` with amd.com/gpu`."""
    names = [name for name, amount in plan.view.extended if amount > 0]
    allowed = plan.allowed
    narrowed = ""
    if allowed is not None:
        described = allowed.constraints.describe()
        narrowed = f" matching {described}" if described else " whose taints it tolerates"
    if names:
        narrowed += f" with {', '.join(names)}"
    return narrowed


def no_room(plan: JobPlan, what: str = "room for more") -> str:
    """"no node has room for more", naming what narrows the nodes the job may use."""
    return f"no node{_narrowed(plan)} has {what}"


def _pool(plan: JobPlan) -> str:
    """When a job's share ends below its max and only some nodes can take its trainers."""
    narrowed = _narrowed(plan)
    if not narrowed or plan.share >= plan.view.max_instance:
        return ""
    return f"; {no_room(plan)}"


def _quota_full(plan: JobPlan) -> bool:
    """Whether the namespace's quotas stop this job below its max."""
    book = plan.book
    return (book is not None and plan.target < plan.view.max_instance
            and book.room_for(plan.quota) == 0)


def _quota(plan: JobPlan) -> str:
    book = plan.book
    return book.binding(plan.quota) if book is not None else "namespace quota"


def reason(plan: JobPlan) -> str:
    """The Decision's reason: the verb (grow/shrink/keep), the counts and the cause."""
    view = plan.view
    before, after = view.parallelism, plan.target
    if after < before or (plan.shrunk and plan.causes):
        return f"shrink {before}->{after}: " + "; ".join(plan.causes or ["above max-instance"])
    if after > before:
        text = f"grow {before}->{after}: "
        if before < view.min_instance and not plan.grown:
            if plan.holding() < view.min_instance:
                return text + "up to min-instance; waiting for room on a node"
            return text + "up to min-instance"
        text += f"placed on nodes with free room (fair share {plan.share})"
        if plan.stopped == "room":
            text += "; " + no_room(plan)
        elif plan.stopped == "quota":
            text += f"; {_quota(plan)} admits no more"
        elif plan.stopped == "load":
            text += f"; {LOAD_CAP} admits no more"
        elif _quota_full(plan):
            text += f"; {_quota(plan)} admits no more"
        elif after >= plan.share:
            text += _pool(plan)
        return text
    if plan.holding() < view.min_instance:
        return (
            f"keep {after}: only {plan.holding()} of min-instance {view.min_instance} "
            "trainers fit; waiting for room to be freed"
        )
    if after >= view.max_instance:
        return f"keep {after}: at max-instance"
    if plan.waiting:
        return f"keep {after}: {plan.waiting} pending trainers wait for room being freed"
    if plan.blocked > 0:
        return f"keep {after}: {plan.blocked} pending trainers fit no node yet"
    if plan.stopped == "room":
        return (
            f"keep {after}: {no_room(plan, 'room for another trainer')} and none can be "
            f"freed for it (fair share {plan.share})"
        )
    if plan.stopped == "quota":
        return f"keep {after}: {_quota(plan)} admits no more trainers (fair share {plan.share})"
    if plan.stopped == "load":
        return f"keep {after}: {LOAD_CAP} admits no more trainers (fair share {plan.share})"
    if _quota_full(plan):
        return f"keep {after}: {_quota(plan)} admits no more trainers (fair share {plan.share})"
    if after > plan.share:
        return f"keep {after}: above its fair share ({plan.share}); no job waits for the room"
    if after == plan.share:
        return f"keep {after}: at its fair share ({plan.share}){_pool(plan)}"
    return f"keep {after}: waiting for room (fair share {plan.share})"
