"""What ``max_load_desired`` caps, and naming it when it is what stops a job.

Why only CPU: the cap keeps headroom on a resource that is shared in fractions
(bursts, system pods, the next small pod); a whole device (a GPU, any extended
resource) held back by it is a device that sits idle while a job could use it
(4 GPUs at 0.97 would leave one unused). So GPU limits are capped at the
cluster's total only, extended resources by node room alone, and memory by its
total; CPU requests at ``max_load_desired`` of the total.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from edl.accounting.types import ClusterResource

if TYPE_CHECKING:  # plan_state builds its Budget with the caps below
    from edl.policy.plan_state import Budget, JobPlan
    from edl.policy.room import Room

__all__ = ["cap_binds", "cpu_cap", "gpu_cap", "note_load_cap"]


def cpu_cap(resources: ClusterResource, max_load_desired: float) -> int:
    """CPU requests (milli) the plan may reach: ``max_load_desired`` of the total."""
    return int(resources.cpu_total_milli * max_load_desired)


def gpu_cap(resources: ClusterResource) -> int:
    """GPU limits the plan may reach: every GPU (whole devices keep no headroom)."""
    return resources.gpu_total


def cap_binds(budget: Budget, cpu: int, memory: int, gpu: int) -> bool:
    """Whether the CPU cap, and not a total, refuses one more trainer of this shape."""
    return (cpu > 0 and budget.cpu + cpu > budget.cpu_cap
            and (gpu == 0 or budget.gpu + gpu <= budget.gpu_cap)
            and (memory == 0 or budget.memory + memory <= budget.memory_cap))


def note_load_cap(plans: Sequence[JobPlan], budget: Budget, room: Room) -> None:
    """Once every step is done, make ``stopped`` say the load cap exactly where it binds
    (the steps read ``stopped``; only the reason reads it after this): "load" for a job
    below its max at its fair share while a node it may use has room for one more
    trainer but the cap does not; "room" for one growth stopped at "load" when it was a
    total (every GPU, all memory) the cluster lacks, not the cap."""
    for plan in plans:
        binds = cap_binds(budget, plan.shape[0], plan.shape[1], plan.view.gpu_limit)
        if plan.stopped == "load" and not binds:
            plan.stopped = "room"
            continue
        if plan.stopped or plan.target >= plan.view.max_instance or plan.target < plan.share:
            continue
        if not binds:
            continue
        flags = plan.allowed.flags if plan.allowed is not None else None
        if any((flags is None or flags[node]) and room.fits(node, plan.shape, coming=False)
               for node in range(room.count)):
            plan.stopped = "load"
