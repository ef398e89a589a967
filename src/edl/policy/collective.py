"""Resizing collective jobs: only to allowed sizes, at most once per cooldown (pure core).

A resize of a collective job is a restart of every worker: all agents
re-rendezvous and the script resumes from its last checkpoint, losing the
progress since then plus the restart time. A live job (`spec.collective.live`,
`edl.elastic`) re-forms its world inside the living workers instead: a pause of
about a second, nothing redone, so its default cooldown is much shorter. A policy
plans as if trainers were free to come and go one at a time; `CollectiveResizes` then bends each
collective job's Decision: the target snaps down to the nearest trainer count
whose world size the spec allows (`world-sizes`, `world-size-multiple`), and a
job resized less than `resize-cooldown` seconds ago keeps its size. Snapping
down is always safe: fewer trainers never need room the plan did not find.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from edl.policy.base import Decision

__all__ = ["CollectiveResizes", "ResizeRule", "gate", "snap"]

Key = tuple[str, str]


@dataclass(frozen=True)
class ResizeRule:
    """One collective job's allowed trainer counts (ascending, non-empty), cooldown, the
    pause of the whole world one resize costs, and whether it resizes live."""

    allowed: tuple[int, ...]
    cooldown_s: float
    pause_s: float = 0.0
    live: bool = False

    @property
    def how(self) -> str:
        return ("re-forms the world in the living workers" if self.live
                else "restarts every worker from the last checkpoint")


def snap(target: int, allowed: Sequence[int]) -> int:
    """The largest allowed count <= target; the smallest allowed one if none is."""
    below = [count for count in allowed if count <= target]
    return max(below) if below else min(allowed)


def gate(
    decision: Decision, rule: ResizeRule, last_resize_at: float | None, now: float
) -> Decision:
    """The Decision a collective job may carry out now."""
    target = snap(decision.target, rule.allowed)
    if target == decision.parallelism:
        if target == decision.target:
            return decision
        return replace(
            decision,
            target=target,
            victim_nodes=(),
            victims=(),
            placement=(),
            reason=f"{decision.reason}; collective: {decision.target} trainers is not an "
            f"allowed size, stays at {target}",
        )
    since = None if last_resize_at is None else now - last_resize_at
    if since is not None and since < rule.cooldown_s:
        return replace(
            decision,
            target=decision.parallelism,
            victim_nodes=(),
            victims=(),
            placement=(),
            reason=f"{decision.reason}; collective: held at {decision.parallelism}, last "
            f"resize {since:.0f} s ago (cooldown {rule.cooldown_s:g} s; a resize {rule.how})",
        )
    snapped = "" if target == decision.target else f" (snapped from {decision.target})"
    grown = max(0, target - decision.parallelism)
    return replace(
        decision,
        target=target,
        placement=decision.placement[:grown],  # the nodes of the trainers still planned
        reason=f"{decision.reason}; collective: resize to {target}{snapped} {rule.how}",
    )


class CollectiveResizes:
    """The Autoscaler's memory of collective jobs: their rules and when each last resized."""

    def __init__(self) -> None:
        self.rules: dict[Key, ResizeRule] = {}
        self.last_resize: dict[Key, float] = {}

    def remember(self, key: Key, rule: ResizeRule | None) -> None:
        """Set (or with None, forget) a job's rule; its resize history is kept."""
        if rule is None or not rule.allowed:
            self.rules.pop(key, None)
        else:
            self.rules[key] = rule

    def forget(self, key: Key) -> None:
        self.rules.pop(key, None)
        self.last_resize.pop(key, None)

    def apply(self, decisions: Sequence[Decision], now: float) -> list[Decision]:
        """Every Decision, collective ones gated; other jobs' untouched."""
        out = []
        for decision in decisions:
            key = (decision.namespace, decision.name)
            rule = self.rules.get(key)
            if rule is not None:
                decision = gate(decision, rule, self.last_resize.get(key), now)
            out.append(decision)
        return out

    def resized(self, key: Key, now: float) -> None:
        if key in self.rules:
            self.last_resize[key] = now
