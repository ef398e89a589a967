"""A job's own topology rules while a plan places its trainers.

Required pod anti-affinity among a job's trainers on `kubernetes.io/hostname` lets
one trainer per node; a `DoNotSchedule` spread constraint lets a domain hold at most
`maxSkew` more than the emptiest domain that counts; required pod affinity keeps
them in one domain (`accounting.eligibility.Topology`). Each such plan gets its own
node mask, narrowed from the nodes its constraints allow to the domains that may take
one more trainer, and recomputed after every trainer the plan places; so growth,
pending trainers and preemption see only nodes where kube-scheduler would bind it,
and trainers beyond what the rules admit fit nowhere (and leave the target:
`choosy.drop_unplaceable`). Nodes without the rule's label take none.
"""

from __future__ import annotations

from collections.abc import Sequence

from edl.accounting.eligibility import FILTERED_EFFECTS, NO_CONSTRAINTS, Topology
from edl.policy.plan_state import JobPlan
from edl.policy.room import Eligible, Room

__all__ = ["TopologyState", "apply_topology"]

_KEYS = iter(range(-1_000_000, -2_000_000, -1))  # mask keys no other Eligible uses


class TopologyState:
    """Per plan: each rule's domain per node and the job's trainers per domain."""

    def __init__(self, plan: JobPlan, room: Room, base: Eligible | None) -> None:
        self.plan, self.room = plan, room
        constraints = plan.view.constraints
        self.rules: list[Topology] = list(constraints.topology)
        self.base = [True] * room.count if base is None else list(base.flags)
        self.domains: list[list[str | None]] = []
        self.counted: list[set[str]] = []
        self.counts: list[dict[str, int]] = []
        facts = room.node_facts()
        for rule in self.rules:
            domain = [dict(f.labels).get(rule.key) for f in facts]
            counted = set()
            for i, name in enumerate(domain):
                if name is None:
                    continue
                ok = True
                if rule.honor_affinity and not constraints.selects(facts[i]):
                    ok = False
                if rule.honor_taints and any(
                    t.effect in FILTERED_EFFECTS for t in facts[i].taints
                ) and constraints.blocker(facts[i]):
                    ok = False
                if ok:
                    counted.add(name)
            counts = dict.fromkeys(counted, 0)
            for _, node in plan.bound:
                name = domain[node] if node >= 0 else None
                if name is not None:
                    counts[name] = counts.get(name, 0) + 1
            self.domains.append(domain)
            self.counted.append(counted)
            self.counts.append(counts)
        self.mask = Eligible(next(_KEYS), constraints or NO_CONSTRAINTS, list(self.base))
        self.refresh()

    def _open(self, r: int) -> set[str] | None:
        """The domains rule `r` lets take one more trainer (None: all with its label)."""
        rule, counts = self.rules[r], self.counts[r]
        named = {d for d in self.domains[r] if d is not None}
        if rule.kind == "apart":
            return {d for d in named if counts.get(d, 0) < 1}
        if rule.kind == "together":
            held = {d for d, n in counts.items() if n > 0}
            return held or None
        counted = self.counted[r]
        low = min((counts.get(d, 0) for d in counted), default=0)
        if rule.min_domains and len(counted) < rule.min_domains:
            low = 0
        return {d for d in named if counts.get(d, 0) + 1 - low <= rule.skew}

    def refresh(self) -> None:
        """Recompute the plan's mask (and restart the room's cursor over it)."""
        flags = list(self.base)
        for r in range(len(self.rules)):
            allowed = self._open(r)
            domain = self.domains[r]
            for i in range(len(flags)):
                if flags[i] and (domain[i] is None or (allowed is not None
                                                       and domain[i] not in allowed)):
                    flags[i] = False
        mask = self.mask
        mask.set(flags)
        for key in [k for k in self.room.cursor if isinstance(k, tuple) and len(k) == 2
                    and k[1] == mask.key]:
            del self.room.cursor[key]
        self.room.reach.clear()

    def placed(self, node: int, delta: int = 1) -> None:
        for r, domain in enumerate(self.domains):
            name = domain[node]
            if name is not None:
                self.counts[r][name] = self.counts[r].get(name, 0) + delta
        self.refresh()


def apply_topology(plans: Sequence[JobPlan], room: Room) -> None:
    """Give every plan whose trainers carry topology rules its own live node mask."""
    if room.count == 0:
        return
    for plan in plans:
        if plan.view.constraints.topology:
            state = TopologyState(plan, room, plan.allowed)
            plan.topology = state
            plan.allowed = state.mask
