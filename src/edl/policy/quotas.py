"""What each namespace's ResourceQuotas leave while a plan is made.

Jobs of one namespace share its quotas, so the book is one running balance per
(quota, capped resource), shared by every plan of that namespace: a trainer the plan
adds in one job is room the next job's growth no longer has. Pods count against a
quota from creation until they are gone, so a trainer shed in this plan gives
nothing back here (it still counts while it drains), and trainers the Job will
create for the current parallelism are charged up front.
"""

from __future__ import annotations

from collections.abc import Sequence

from edl.accounting.quota import QuotaPod, pod_usage, quota_matches
from edl.accounting.types import QuotaRoom
from edl.policy.base import JobView

__all__ = ["QuotaBook"]


def _show(key: str, amount: int) -> str:
    if key in ("cpu", "requests.cpu", "limits.cpu"):
        return f"{amount}m"
    if key in ("memory", "requests.memory", "limits.memory"):
        return f"{amount}M"
    return str(amount)


class QuotaBook:
    """Per quota and capped resource: what is left (`hard - used - planned`)."""

    def __init__(self, quotas: Sequence[QuotaRoom]) -> None:
        self.quotas = list(quotas)
        self.left = [
            {key: hard - quota.used.get(key, 0) for key, hard in quota.hard.items()}
            for quota in self.quotas
        ]
        # what pods already leaving (or shed by this plan) give back once they are gone:
        # it settles an over-full quota, but nothing grows into it before they exit
        self.coming = [dict.fromkeys(quota.hard, 0) for quota in self.quotas]
        # per enrolled job: (quota index, key, what one trainer costs there)
        self.entries: list[list[tuple[int, str, int]]] = []

    def enrol(self, view: JobView, creations: int, leaving: int = 0) -> int:
        """Register a job's trainer; charge the `creations` its Job still has to make,
        and count its `leaving` pods as coming back.

        Returns its entry (-1 when no quota of its namespace counts its trainers).
        """
        traits = QuotaPod(
            view.priority_class,
            best_effort=not (view.cpu_request_milli or view.cpu_limit_milli
                             or view.memory_request_mega or view.memory_limit_mega),
            terminating=view.terminating,
        )
        pod = view.per_pod
        costs = []
        for index, quota in enumerate(self.quotas):
            if quota.namespace != view.namespace or not quota_matches(quota, traits):
                continue
            for key in sorted(quota.hard):
                cost = pod_usage(key, pod)
                if cost > 0:
                    costs.append((index, key, cost))
        if not costs:
            return -1
        self.entries.append(costs)
        for index, key, cost in costs:
            self.left[index][key] -= cost * max(0, creations)
            self.coming[index][key] += cost * leaving
        return len(self.entries) - 1

    def room_for(self, entry: int) -> int | None:
        """How many more trainers the quotas admit (None: no quota counts them)."""
        if entry < 0:
            return None
        return max(0, min(self.left[i][key] // cost for i, key, cost in self.entries[entry]))

    def over(self, entry: int) -> bool:
        """Whether a quota that counts this job's trainers stays past `hard` even once the
        pods already leaving are gone."""
        return entry >= 0 and any(
            self.left[i][key] + self.coming[i][key] < 0 for i, key, _ in self.entries[entry]
        )

    def give(self, entry: int, created: bool = False) -> None:
        """A trainer charged here will not be created after all; or (`created`) a pod
        that exists is shed: its share comes back once it is gone."""
        if entry >= 0:
            for i, key, cost in self.entries[entry]:
                if created:
                    self.coming[i][key] += cost
                else:
                    self.left[i][key] += cost

    def fits(self, entry: int) -> bool:
        return entry < 0 or all(self.left[i][key] >= cost for i, key, cost in self.entries[entry])

    def take(self, entry: int) -> None:
        if entry >= 0:
            for i, key, cost in self.entries[entry]:
                self.left[i][key] -= cost

    def binding(self, entry: int) -> str:
        """The quota and resource with the least room: `ns/name (requests.cpu: 8000m of 8000m)`."""
        if entry < 0:
            return ""
        i, key, _cost = min(self.entries[entry], key=lambda e: (self.left[e[0]][e[1]] // e[2], e))
        quota = self.quotas[i]
        hard = quota.hard[key]
        return (
            f"namespace quota {quota.namespace}/{quota.name} ({key}: "
            f"{_show(key, hard - self.left[i][key])} of {_show(key, hard)} used or planned)"
        )
