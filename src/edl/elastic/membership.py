"""Who is in the world: generations agreed on through the job's rendezvous store.

The store is the c10d `TCPStore` the master pod already hosts for collective jobs
(`edl rendezvous`); every key lives under one prefix per job. A *generation* is one
world: a plan (the workers expected, written once with compare-and-set, so every
proposer ends up with the same one), then a verdict (the workers that really
arrived, ordered with the most advanced state first; also written once). The
verdict's order is the ranks of the new process group, whose own keys live under a
prefix of their own (``pg/<gen>/``), so no round ever reads another's keys.

Joiners register in a sequence (``joiners`` counts them, ``joiner/<slot>`` names
each) once they are warm, and wait for ``admit/<slot>`` to name their generation.
The world reads the sequence at every step boundary; the first generation is
founded by the joiners themselves once enough of them are there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

__all__ = ["Arrival", "Membership", "Plan", "admissible", "next_plan", "order_arrivals"]


class Store(Protocol):
    """The part of `torch.distributed.Store` used here."""

    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def add(self, key: str, value: int) -> int: ...
    def compare_set(self, key: str, expected: str, desired: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...
    def wait(self, keys: list[str], timeout: timedelta) -> None: ...


@dataclass(frozen=True)
class Plan:
    """Generation ``gen``'s expected workers; joiner slots below ``joiners_upto`` are
    in this or an earlier generation."""

    gen: int
    members: tuple[str, ...]
    joiners_upto: int
    admitted: tuple[int, ...] = ()  # the joiner slots this plan admits

    def to_json(self) -> str:
        return json.dumps({"gen": self.gen, "members": list(self.members),
                           "joiners_upto": self.joiners_upto, "admitted": list(self.admitted)})

    @staticmethod
    def from_json(text: str | bytes) -> Plan:
        raw: dict[str, Any] = json.loads(text)
        return Plan(int(raw["gen"]), tuple(raw["members"]), int(raw["joiners_upto"]),
                    tuple(int(s) for s in raw.get("admitted", ())))


@dataclass(frozen=True)
class Arrival:
    """A worker that arrived for a generation, and how far its state has got."""

    ident: str
    step: int  # global steps in its state; -1: a joiner with no state yet


def next_plan(
    current: Plan, leaving: Sequence[str], joiners: Sequence[tuple[int, str]], upto: int
) -> Plan:
    """The next generation after a change agreed at a step boundary (pure): the members
    that stay, in their order, then the joiners in slot order."""
    gone = set(leaving)
    stay = [m for m in current.members if m not in gone]
    fresh = [ident for _, ident in sorted(joiners) if ident not in stay]
    return Plan(current.gen + 1, (*stay, *fresh), max(upto, current.joiners_upto),
                tuple(slot for slot, _ in sorted(joiners)))


def admissible(stay: int, pending: int, allowed: Sequence[int] | None) -> int:
    """How many of the ``pending`` joiners (first come first) to admit to a world of
    ``stay`` workers (pure): all of them, or with ``allowed`` world sizes the most that
    give one (0: they wait for more, so a spec's world sizes are kept)."""
    if not allowed:
        return pending
    fits = [k for k in range(1, pending + 1) if stay + k in allowed]
    return max(fits) if fits else 0


def order_arrivals(plan: Plan, arrivals: Sequence[Arrival]) -> list[Arrival]:
    """The verdict's order (pure): the most advanced state first (it becomes rank 0 and
    the source every other worker copies), then the plan's order."""
    position = {ident: i for i, ident in enumerate(plan.members)}
    return sorted(arrivals, key=lambda a: (-a.step, position.get(a.ident, len(position))))


class Membership:
    """One worker's view of the store's membership keys (prefix per job)."""

    def __init__(self, store: Store, prefix: str, ident: str) -> None:
        self.store = store
        self.prefix = prefix.rstrip("/") + "/"
        self.ident = ident

    def _k(self, *parts: object) -> str:
        return self.prefix + "/".join(str(p) for p in parts)

    # -- joiners ----------------------------------------------------------------------
    def register(self) -> int:
        """Join the queue of warm workers; returns this worker's slot."""
        slot = self.store.add(self._k("joiners"), 1) - 1
        self.store.set(self._k("joiner", slot), self.ident)
        return slot

    def joiners_seen(self) -> int:
        return self.store.add(self._k("joiners"), 0)

    def joiner_idents(self, low: int, high: int) -> list[tuple[int, str]]:
        keys = [self._k("joiner", slot) for slot in range(low, high)]
        if keys:
            self.store.wait(keys, timedelta(seconds=30))
        return [(slot, self.store.get(key).decode()) for slot, key in zip(
            range(low, high), keys, strict=True)]

    def admitted(self, slot: int) -> int | None:
        key = self._k("admit", slot)
        return int(self.store.get(key)) if self.store.check([key]) else None

    # -- plans and verdicts -----------------------------------------------------------
    def propose(self, plan: Plan) -> Plan:
        """Offer a plan for its generation; returns the one the store holds (the first)."""
        held = Plan.from_json(self.store.compare_set(self._k("plan", plan.gen), "", plan.to_json()))
        for slot in held.admitted:
            self.store.set(self._k("admit", slot), str(held.gen))
        self._raise_latest(held.gen)
        return held

    def plan(self, gen: int, timeout_s: float = 30.0) -> Plan:
        key = self._k("plan", gen)
        self.store.wait([key], timedelta(seconds=timeout_s))
        return Plan.from_json(self.store.get(key))

    def has_plan(self, gen: int) -> bool:
        return self.store.check([self._k("plan", gen)])

    def latest(self) -> int | None:
        key = self._k("latest")
        return int(self.store.get(key)) if self.store.check([key]) else None

    def _raise_latest(self, gen: int) -> None:
        key = self._k("latest")
        current = ""
        while True:
            held = self.store.compare_set(key, current, str(gen)).decode()
            if held == str(gen) or (held and int(held) >= gen):
                return
            current = held

    def arrive(self, plan: Plan, step: int, timeout_s: float) -> list[Arrival]:
        """Say this worker is here for ``plan``; wait for the others (at most
        ``timeout_s``); returns the verdict every worker of the generation gets."""
        self.store.set(self._k("in", plan.gen, self.ident), str(step))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            expected = [m for m in plan.members if not self.store.check([self._k("gone", m)])]
            if self.store.check([self._k("in", plan.gen, m) for m in expected]):
                break
            time.sleep(0.005)
        here = [
            Arrival(m, int(self.store.get(self._k("in", plan.gen, m))))
            for m in plan.members if self.store.check([self._k("in", plan.gen, m)])
        ]
        proposal = json.dumps([[a.ident, a.step] for a in order_arrivals(plan, here)])
        held = self.store.compare_set(self._k("verdict", plan.gen), "", proposal)
        return [Arrival(str(ident), int(step)) for ident, step in json.loads(held)]

    def mark_gone(self, ident: str) -> None:
        """``ident`` has died (its agent saw it): no generation waits for it any more."""
        self.store.set(self._k("gone", ident), "1")

    def beat(self) -> None:
        self.store.set(self._k("beat"), f"{time.time():.3f}")

    def last_beat(self) -> float | None:
        key = self._k("beat")
        return float(self.store.get(key)) if self.store.check([key]) else None
