"""Nodes and the scheduler: bind pending pods to nodes by their requests, scored as
kube-scheduler scores them.

Filter, as ``NodeResourcesFit``: a pod fits a node when its CPU, memory and GPU
requests are within the node's free room (allocatable minus the requests of the
pods bound there, terminating ones included); as ``TaintToleration`` and
``NodeAffinity``: the node's NoSchedule/NoExecute taints are tolerated and its labels
match the pod's nodeSelector and required terms (`edl.accounting.eligibility`).
The queue is ordered as ``PrioritySort`` (higher `spec.priority` first). A pod that
fits nowhere may preempt lower-priority pods (`preemption.py`: it is nominated and
room is held for it); otherwise it stays Pending and is retried when room frees.

Score, as the default profile (`pkg/scheduler/framework/plugins/noderesources`),
CPU and memory with weight 1 each, both plugins weight 1, the requests counted
including the pod being placed:

* ``spread`` — ``NodeResourcesFit`` with the ``LeastAllocated`` strategy
  (``(allocatable - requested) * 100 / allocatable`` per resource, integer
  arithmetic, weighted mean) plus ``NodeResourcesBalancedAllocation``
  (``(1 - |cpu fraction - memory fraction| / 2) * 100``): the default scheduler.
* ``binpack`` — the same profile with ``scoringStrategy: MostAllocated``
  (``requested * 100 / allocatable``), BalancedAllocation still on.

plus, for a pod with preferred node affinity, ``NodeAffinity`` (weight 2): the
weights of the terms a node matches, normalised to 0..100 over the feasible nodes
(`affinity.py`). The highest total wins; ties are broken at random (seeded), as
``selectHost``.
Simplifications: all feasible nodes are scored (upstream scores every node below
100 nodes, a sample above); a pod without requests is scored as requesting
nothing (upstream's non-zero defaults are 100m CPU / 200 MB).

Why numpy: a 1,000-node cluster binds tens of thousands of pods in one simulated
hour; filtering and scoring every node is a few vector operations per pod. A
scheduling pass visits the queue once and skips pods whose exact shape already
failed in this pass.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any, Literal

import numpy as np

from edl.accounting.eligibility import NodeFacts, PodConstraints
from edl.cluster.inproc.affinity import (
    NODE_AFFINITY_WEIGHT,
    LabelIndex,
    PreferredTerm,
    normalize,
)
from edl.cluster.inproc.pods import PodRecord

Placement = Literal["spread", "binpack"]
PLACEMENTS: tuple[Placement, ...] = ("spread", "binpack")
MAX_NODE_SCORE = 100


class Node:
    """A node's allocatable resources and the room its bound pods leave."""

    __slots__ = (
        "cpu_milli",
        "facts",
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
        labels: dict[str, str] | None = None, facts: NodeFacts | None = None,
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
        # what TaintToleration and NodeAffinity's required part read (labels, taints)
        self.facts = facts or NodeFacts(name, tuple(sorted(self.labels.items())))


def unschedulable_reason(
    nodes: Iterable[Node], cpu_milli: int, memory_mega: int, gpu: int, *, total: bool = False,
    constraints: PodConstraints | None = None,
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
        blocker = constraints.blocker(node.facts) if constraints is not None else ""
        if blocker:
            why = f"node(s) had {blocker}" if blocker.startswith("untolerated") else (
                "node(s) didn't match Pod's node affinity/selector")
            counts[why] = counts.get(why, 0) + 1
            continue
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


def resource_scores(
    alloc_cpu: np.ndarray, alloc_mem: np.ndarray, req_cpu: np.ndarray, req_mem: np.ndarray,
    placement: Placement,
) -> np.ndarray:
    """NodeResourcesFit (Least- or MostAllocated) + BalancedAllocation, per node.

    ``req_*`` already include the pod being placed. Integer arithmetic where
    upstream uses int64; a resource a node has none of is left out of the mean.
    """
    has_cpu, has_mem = alloc_cpu > 0, alloc_mem > 0
    safe_cpu, safe_mem = np.where(has_cpu, alloc_cpu, 1), np.where(has_mem, alloc_mem, 1)
    if placement == "spread":
        cpu_score = (safe_cpu - req_cpu) * MAX_NODE_SCORE // safe_cpu
        mem_score = (safe_mem - req_mem) * MAX_NODE_SCORE // safe_mem
    else:
        cpu_score = req_cpu * MAX_NODE_SCORE // safe_cpu
        mem_score = req_mem * MAX_NODE_SCORE // safe_mem
    cpu_score = np.where(has_cpu & (req_cpu <= alloc_cpu), cpu_score, 0)
    mem_score = np.where(has_mem & (req_mem <= alloc_mem), mem_score, 0)
    weights = has_cpu.astype(np.int64) + has_mem.astype(np.int64)
    fit = np.where(weights > 0, (cpu_score * has_cpu + mem_score * has_mem)
                   // np.maximum(weights, 1), 0)
    cpu_fraction = np.minimum(req_cpu / safe_cpu, 1.0)
    mem_fraction = np.minimum(req_mem / safe_mem, 1.0)
    std = np.where(has_cpu & has_mem, np.abs(cpu_fraction - mem_fraction) / 2, 0.0)
    balanced = ((1 - std) * MAX_NODE_SCORE).astype(np.int64)
    return fit + balanced


class NodeIndex:
    """The nodes, and their allocatable and free room as arrays for vector filter+score."""

    def __init__(self, placement: Placement = "spread", seed: int = 0) -> None:
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, not {placement!r}")
        self.placement = placement
        self.nodes: list[Node] = []
        self.by_name: dict[str, Node] = {}
        self.labels = LabelIndex()
        self._rng = random.Random(seed)
        # rows: allocatable cpu, allocatable memory, free cpu, free memory, free gpu
        self._room = np.zeros((5, 16), dtype=np.int64)
        self._eligible: dict[PodConstraints, np.ndarray] = {}

    def eligible(self, constraints: PodConstraints) -> np.ndarray:
        """Per node, whether TaintToleration and NodeAffinity (required) let the pod on."""
        mask = self._eligible.get(constraints)
        if mask is None:
            mask = np.array([not constraints.blocker(n.facts) for n in self.nodes], dtype=bool)
            self._eligible[constraints] = mask
        return mask

    def add(self, node: Node) -> None:
        n = len(self.nodes)
        if n == self._room.shape[1]:
            self._room = np.concatenate([self._room, np.zeros_like(self._room)], axis=1)
        self._room[:, n] = (node.cpu_milli, node.memory_mega, node.free_cpu_milli,
                            node.free_memory_mega, node.free_gpu)
        self.nodes.append(node)
        self.by_name[node.name] = node
        self.labels.add(node.name, node.labels)
        self._eligible.clear()

    def max_free_cpu_milli(self) -> int:
        n = len(self.nodes)
        return int(self._room[2, :n].max()) if n else 0

    def find(
        self, cpu_milli: int, memory_mega: int, gpu: int,
        preferred: tuple[PreferredTerm, ...] = (),
        constraints: PodConstraints | None = None,
    ) -> Node | None:
        """The node the scheduler binds a pod with these requests (these preferred
        node-affinity terms, and these taint/selector constraints) to, or None."""
        n = len(self.nodes)
        room = self._room[:, :n]
        fits = (room[2] >= cpu_milli) & (room[3] >= memory_mega) & (room[4] >= gpu)
        if constraints is not None:
            fits &= self.eligible(constraints)
        feasible = np.flatnonzero(fits)
        if feasible.size == 0:
            return None
        alloc_cpu, alloc_mem = room[0, feasible], room[1, feasible]
        scores = resource_scores(
            alloc_cpu, alloc_mem,
            alloc_cpu - room[2, feasible] + cpu_milli,
            alloc_mem - room[3, feasible] + memory_mega,
            self.placement,
        )
        if preferred:
            raw = self.labels.raw_scores(preferred)[feasible]
            scores = scores + NODE_AFFINITY_WEIGHT * normalize(raw)
        best = np.flatnonzero(scores == scores.max())
        pick = best[0] if best.size == 1 else best[self._rng.randrange(best.size)]
        return self.nodes[int(feasible[pick])]

    def take(self, node: Node, cpu_milli: int, memory_mega: int, gpu: int) -> None:
        """Subtract (or with negative amounts, give back) room on a node."""
        node.free_cpu_milli -= cpu_milli
        node.free_memory_mega -= memory_mega
        node.free_gpu -= gpu
        self._room[2:, node.index] = (node.free_cpu_milli, node.free_memory_mega, node.free_gpu)


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
        preempt: Callable[[PodRecord], bool] = lambda pod: False,
    ) -> None:
        self.nodes = nodes
        self._preempt = preempt
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
        """Try to bind waiting pods, highest priority first, then oldest (PrioritySort);
        a pod that does not fit may preempt lower-priority pods, else keeps waiting."""
        self._pass_scheduled = False
        self.passes += 1
        retry = self._room_freed
        if retry:
            candidates = list(self.queue.values())
        else:  # nothing freed since the last pass: only new pods can newly fit
            candidates = [pod for pod in self._new if pod.uid in self.queue]
        self._room_freed = False
        self._new = []
        candidates.sort(key=lambda pod: -pod.priority)  # stable: FIFO within a priority
        failed: set[tuple[object, ...]] = set()
        reasons: dict[tuple[object, ...], str] = {}
        newly_unschedulable = False
        nodes = self.nodes
        for pod in candidates:
            res = pod.resources
            shape = (res.cpu_request_milli, res.memory_request_mega, res.gpu_request)
            if pod.nominated and self._settle_nominated(pod, shape):
                continue
            kind = (shape, pod.constraints, pod.priority)
            node = None if kind in failed else nodes.find(*shape, pod.preferred, pod.constraints)
            if node is None and kind not in failed and self._preempt(pod):
                continue  # nominated: it waits for its victims to leave
            if node is None:
                if kind not in reasons:  # once per kind and pass: O(nodes)
                    reasons[kind] = unschedulable_reason(
                        nodes.nodes, *shape, constraints=pod.constraints)
                mark_unschedulable(pod.manifest, reasons[kind])
                failed.add(kind)
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

    def _settle_nominated(self, pod: PodRecord, shape: tuple[int, int, int]) -> bool:
        """A nominated pod: bind it on its node once the room held there suffices;
        True while it keeps waiting there (its victims still leaving)."""
        node = self.nodes.by_name[pod.nominated]
        free = (node.free_cpu_milli, node.free_memory_mega, node.free_gpu)
        if all(f >= 0 for f in free):  # the held room is really free now
            self.queue.pop(pod.uid, None)
            pod.nominated = ""
            pod.waiting_for.clear()
            pod.manifest["status"].pop("nominatedNodeName", None)
            self._bind(pod, node)  # its room was taken when it was nominated
            return True
        if pod.waiting_for:
            return True
        self.nodes.take(node, -shape[0], -shape[1], -shape[2])  # give the hold back
        pod.nominated = ""
        pod.manifest["status"].pop("nominatedNodeName", None)
        return False
