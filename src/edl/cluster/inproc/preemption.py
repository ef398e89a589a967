"""kube-scheduler's default preemption, transcribed (pure).

`pkg/scheduler/framework/preemption` with the `DefaultPreemption` plugin: a pod that
fits no node may evict pods of *lower* priority.

* `select_victims_on_node` (`SelectVictimsOnNode`): remove every lower-priority pod
  from the node; if the preemptor still does not fit (or may not use the node at
  all), the node is no candidate. Otherwise reprieve the removed pods one by one,
  most important first (higher priority, then the one that started earlier), putting
  back each one the preemptor still fits beside; those left are the victims — the
  lowest-priority pods, and no more than the pod needs.
* `pick_node` (`pickOneNodeForPreemption`, without PodDisruptionBudgets): the node
  whose most important victim has the lowest priority, then the lowest sum of victim
  priorities, then the fewest victims, then the latest start among the most important
  victims, then the first node.

The preemptor is then *nominated* to the node (`status.nominatedNodeName`), its
victims are deleted with the `DisruptionTarget` condition, reason
`PreemptionByScheduler`, and the room they free is held for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Candidate", "Victim", "pick_node", "select_victims_on_node"]

Room = tuple[int, ...]  # free room of a node, one entry per resource


@dataclass(frozen=True, slots=True)
class Victim:
    """A pod that may be preempted: its name, priority, start time and requests."""

    name: str
    priority: int
    started: float
    requests: Room


@dataclass(frozen=True, slots=True)
class Candidate:
    node: int
    victims: tuple[Victim, ...]


def _fits(want: Room, free: Room) -> bool:
    return all(w <= f for w, f in zip(want, free, strict=True))


def _add(a: Room, b: Room, sign: int = 1) -> Room:
    return tuple(x + sign * y for x, y in zip(a, b, strict=True))


def select_victims_on_node(
    want: Room, priority: int, free: Room, pods: Sequence[Victim]
) -> tuple[Victim, ...] | None:
    """The victims on one node that make a pod with `want` requests and `priority` fit,
    or None when removing every lower-priority pod is not enough."""
    lower = [p for p in pods if p.priority < priority]
    room = free
    for pod in lower:
        room = _add(room, pod.requests)
    if not _fits(want, room):
        return None
    victims = []
    for pod in sorted(lower, key=lambda p: (-p.priority, p.started, p.name)):
        back = _add(room, pod.requests, -1)
        if _fits(want, back):
            room = back  # reprieved: it stays
        else:
            victims.append(pod)
    return tuple(victims)


def pick_node(candidates: Sequence[Candidate]) -> Candidate | None:
    """The candidate kube-scheduler preempts on (see the module doc), or None."""
    if not candidates:
        return None

    def rank(c: Candidate) -> tuple[int, int, int, float, int]:
        top = max((v.priority for v in c.victims), default=-(1 << 31))
        starts = [v.started for v in c.victims if v.priority == top]
        latest_start = min(starts) if starts else 0.0
        return (top, sum(v.priority for v in c.victims), len(c.victims), -latest_start, c.node)

    return min(candidates, key=rank)


def find_candidate(
    want: Room, priority: int, nodes: Sequence[int], free: Callable[[int], Room],
    pods_on: Callable[[int], Sequence[Victim]],
) -> Candidate | None:
    """Every eligible node's victims, then the node picked among them."""
    candidates = []
    for node in nodes:
        victims = select_victims_on_node(want, priority, free(node), pods_on(node))
        if victims is not None and victims:
            candidates.append(Candidate(node, victims))
    return pick_node(candidates)
