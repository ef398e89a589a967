"""Nodes and the scheduler: bind pending pods to nodes by their requests.

Fit is by requests, as kube-scheduler's NodeResourcesFit: a pod fits a node
when its CPU, memory and GPU requests are within the node's free room
(allocatable minus the requests of the pods bound there, terminating ones
included). Pods that fit nowhere stay Pending and are retried when room frees.

Placement among the nodes that fit:

* ``spread`` — the node with the most free CPU (kube-scheduler's default
  LeastAllocated scoring, CPU-dominant): load spreads evenly.
* ``binpack`` — the node with the least free CPU that still fits
  (MostAllocated): fills nodes up and keeps big holes for big pods.

Why an index: a 1,000-node cluster binds tens of thousands of pods in one
simulated hour. Nodes are kept in a list sorted by free CPU, so finding the
first node with enough CPU is a bisection; memory and GPU are checked while
walking from there. A scheduling pass visits the queue once and skips pods whose
exact shape already failed in this pass.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Any, Literal

from edl.cluster.inproc.pods import PodRecord

Placement = Literal["spread", "binpack"]
PLACEMENTS: tuple[Placement, ...] = ("spread", "binpack")


class Node:
    """A node's allocatable resources and the room its bound pods leave."""

    __slots__ = (
        "cpu_milli",
        "free_cpu_milli",
        "free_gpu",
        "free_memory_mega",
        "gpu",
        "index",
        "labels",
        "memory_mega",
        "name",
    )

    def __init__(
        self, name: str, index: int, cpu_milli: int, memory_mega: int, gpu: int,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.index = index
        self.cpu_milli = cpu_milli
        self.memory_mega = memory_mega
        self.gpu = gpu
        self.free_cpu_milli = cpu_milli
        self.free_memory_mega = memory_mega
        self.free_gpu = gpu
        self.labels = labels or {}


def unschedulable_reason(
    nodes: Iterable[Node], cpu_milli: int, memory_mega: int, gpu: int, *, total: bool = False
) -> str:
    """Why a pod with these requests fits no node, in kube-scheduler's words.

    ``0/3 nodes are available: 2 Insufficient cpu, 1 Insufficient memory.`` — each
    node counted once per resource it lacks. With ``total`` the nodes' allocatable is
    compared instead of their free room: a pod that fails that can never be scheduled.
    """
    counts: dict[str, int] = {}
    size = 0
    for node in nodes:
        size += 1
        room = (
            (node.cpu_milli, node.memory_mega, node.gpu)
            if total
            else (node.free_cpu_milli, node.free_memory_mega, node.free_gpu)
        )
        for name, want, have in zip(
            ("cpu", "memory", "nvidia.com/gpu"), (cpu_milli, memory_mega, gpu), room, strict=True
        ):
            if want > have:
                counts[f"Insufficient {name}"] = counts.get(f"Insufficient {name}", 0) + 1
    if not counts:
        return ""
    reasons = ", ".join(f"{n} {why}" for why, n in sorted(counts.items(), key=lambda kv: kv[0]))
    return f"0/{size} nodes are available: {reasons}."


def mark_unschedulable(manifest: dict[str, Any], reason: str) -> None:
    """Write the PodScheduled=False condition kube-scheduler sets on a pod that fits nowhere."""
    status = manifest.setdefault("status", {})
    others = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    status["conditions"] = [
        *others,
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason},
    ]


class NodeIndex:
    """Nodes sorted by free CPU, for O(log n) fit queries."""

    def __init__(self, placement: Placement = "spread") -> None:
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, not {placement!r}")
        self.placement = placement
        self.nodes: list[Node] = []
        self.by_name: dict[str, Node] = {}
        self._by_free: list[tuple[int, int]] = []  # (free cpu, node index), sorted

    def add(self, node: Node) -> None:
        self.nodes.append(node)
        self.by_name[node.name] = node
        bisect.insort(self._by_free, (node.free_cpu_milli, node.index))

    def max_free_cpu_milli(self) -> int:
        return self._by_free[-1][0] if self._by_free else 0

    def find(self, cpu_milli: int, memory_mega: int, gpu: int) -> Node | None:
        """The node this placement picks for a pod with these requests, or None."""
        by_free = self._by_free
        start = bisect.bisect_left(by_free, (cpu_milli, -1))
        nodes = self.nodes
        candidates = range(start, len(by_free))
        if self.placement == "spread":
            candidates = reversed(candidates)  # type: ignore[assignment]
        for position in candidates:
            node = nodes[by_free[position][1]]
            if node.free_memory_mega >= memory_mega and node.free_gpu >= gpu:
                return node
        return None

    def take(self, node: Node, cpu_milli: int, memory_mega: int, gpu: int) -> None:
        """Subtract (or with negative amounts, give back) room on a node."""
        if cpu_milli:
            by_free = self._by_free
            old = (node.free_cpu_milli, node.index)
            del by_free[bisect.bisect_left(by_free, old)]
            node.free_cpu_milli -= cpu_milli
            bisect.insort(by_free, (node.free_cpu_milli, node.index))
        node.free_memory_mega -= memory_mega
        node.free_gpu -= gpu


class Scheduler:
    """The queue of unbound pods and the passes that bind them.

    ``bind(pod, node)`` is called for each placement (after room is taken);
    ``on_unschedulable()`` once per pass in which some pod newly failed to fit, or
    a pod other than a trainer failed again after room was freed;
    ``call_soon(fn)`` defers a pass to the next loop iteration so that a burst
    of changes (a ReplicaSet creating 300 pods) costs one pass.
    """

    def __init__(
        self,
        nodes: NodeIndex,
        bind: Callable[[PodRecord, Node], None],
        on_unschedulable: Callable[[], None],
        call_soon: Callable[[Callable[[], None]], object],
    ) -> None:
        self.nodes = nodes
        self._bind = bind
        self._on_unschedulable = on_unschedulable
        self._call_soon = call_soon
        self.queue: dict[str, PodRecord] = {}  # uid -> pod, FIFO
        self._new: list[PodRecord] = []
        self._room_freed = False
        self._pass_scheduled = False
        self.passes = 0

    def enqueue(self, pod: PodRecord) -> None:
        self.queue[pod.uid] = pod
        self._new.append(pod)
        self._request_pass()

    def dequeue(self, pod: PodRecord) -> None:
        self.queue.pop(pod.uid, None)

    def room_freed(self) -> None:
        """Room appeared (a pod left, a node joined): retry every waiting pod."""
        self._room_freed = True
        if self.queue:
            self._request_pass()

    def _request_pass(self) -> None:
        if not self._pass_scheduled:
            self._pass_scheduled = True
            self._call_soon(self.run_pass)

    def run_pass(self) -> None:
        """Try to bind waiting pods, oldest first; a pod that does not fit keeps waiting."""
        self._pass_scheduled = False
        self.passes += 1
        retry = self._room_freed
        if retry:
            candidates = list(self.queue.values())
        else:  # nothing freed since the last pass: only new pods can newly fit
            candidates = [pod for pod in self._new if pod.uid in self.queue]
        self._room_freed = False
        self._new = []
        failed: set[tuple[int, int, int]] = set()
        reasons: dict[tuple[int, int, int], str] = {}
        newly_unschedulable = False
        nodes = self.nodes
        for pod in candidates:
            res = pod.resources
            shape = (res.cpu_request_milli, res.memory_request_mega, res.gpu_request)
            node = None if shape in failed else nodes.find(*shape)
            if node is None:
                if shape not in reasons:  # once per shape and pass: O(nodes)
                    reasons[shape] = unschedulable_reason(nodes.nodes, *shape)
                mark_unschedulable(pod.manifest, reasons[shape])
                failed.add(shape)
                # Alarm when a pod first fails to fit, and when a service (not a trainer,
                # which the autoscaler plans itself) still fails after room was freed:
                # the room that freed was not enough or not where it is needed.
                if not pod.unschedulable or (retry and pod.role != "trainer"):
                    newly_unschedulable = True
                pod.unschedulable = True
                continue
            del self.queue[pod.uid]
            if pod.unschedulable:  # as kube-scheduler: the condition turns True on binding
                conditions = pod.manifest["status"]["conditions"]
                conditions[-1] = {"type": "PodScheduled", "status": "True"}
            nodes.take(node, *shape)
            self._bind(pod, node)
        if newly_unschedulable:
            self._on_unschedulable()
