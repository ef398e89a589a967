"""Which pods a controller deletes first when it has too many: Kubernetes' orderings.

* The Job controller (`pkg/controller/job/job_controller.go`, ``activePodsForRemoval``)
  sorts with ``controller.ActivePods`` (`pkg/controller/controller_utils.go`):
  unassigned < assigned; Pending < Running; not ready < ready; ready for less
  time < more; more container restarts first; newer < older.
* The ReplicaSet controller (`pkg/controller/replicaset/replica_set.go`,
  ``getPodsToDelete``) sorts with ``controller.ActivePodsWithRanks``: the same first
  three rules, then a lower ``controller.kubernetes.io/pod-deletion-cost`` first,
  then pods on a node with more pods of the same ReplicaSet ("doubled up") first,
  then ready time compared in log2 buckets (``LogarithmicScaleDown``, on by
  default) with the pod UID breaking a tie, then restarts, then newer first.

In process a pod is ready exactly when it is Running (no readiness probes), its
ready time is ``running_at``, and no container restarts in place (restart counts
are 0). Pure functions over `PodRecord`s, so the tests can pin each rule.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Sequence

from edl.cluster.inproc.pods import RUNNING, PodRecord

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_NANOS = 1_000_000_000


def deletion_cost(pod: PodRecord) -> int:
    """The pod's deletion cost annotation (an int32; absent or invalid: 0)."""
    text = ((pod.manifest.get("metadata") or {}).get("annotations") or {}).get(DELETION_COST)
    try:
        cost = int(str(text))
    except (TypeError, ValueError):
        return 0
    return cost if -(2**31) <= cost < 2**31 else 0


def _phase_ordinal(pod: PodRecord) -> int:
    return 2 if pod.phase == RUNNING else 0  # Pending 0, Unknown 1 (never here), Running 2


def _first_three(a: PodRecord, b: PodRecord) -> int:
    """Unassigned < assigned, Pending < Running, not ready < ready (-1: a first)."""
    if (a.node is None) != (b.node is None):
        return -1 if a.node is None else 1
    if _phase_ordinal(a) != _phase_ordinal(b):
        return -1 if _phase_ordinal(a) < _phase_ordinal(b) else 1
    return 0  # ready == running here, already compared by phase


def _newer_first(a: float | None, b: float | None) -> int:
    """``afterOrZero``: an empty time first, then the later time first."""
    if a == b:
        return 0
    if a is None:
        return -1
    if b is None:
        return 1
    return -1 if a > b else 1


def _creation(a: PodRecord, b: PodRecord) -> int:
    if a.created_at != b.created_at:
        return -1 if a.created_at > b.created_at else 1
    return -1 if a.seq > b.seq else (1 if a.seq < b.seq else 0)  # same instant: later first


def job_removal_order(pods: Iterable[PodRecord]) -> list[PodRecord]:
    """``activePodsForRemoval`` of a non-indexed Job: the pods to delete first come first."""

    def compare(a: PodRecord, b: PodRecord) -> int:
        return (
            _first_three(a, b)
            or (_newer_first(a.running_at, b.running_at) if a.phase == b.phase == RUNNING else 0)
            or _creation(a, b)
        )

    return sorted(pods, key=functools.cmp_to_key(compare))


def _log_rank_diff(t1: float, t2: float, now: float) -> int:
    """``logarithmicRankDiff``: compare how long two pods have been ready in log2 buckets."""
    d1, d2 = (now - t1) * _NANOS, (now - t2) * _NANOS
    r1 = int(math.log2(d1)) if d1 > 0 else -1
    r2 = int(math.log2(d2)) if d2 > 0 else -1
    return r1 - r2


def replica_set_removal_order(
    pods: Sequence[PodRecord], related: Iterable[PodRecord], now: float
) -> list[PodRecord]:
    """``getPodsToDelete``: ``pods`` ranked by ``ActivePodsWithRanks``, first to delete first.

    ``related`` are the owner's active pods; a pod's rank is how many of them share
    its node (upstream counts them by ``spec.nodeName``, unassigned ones together).
    """
    on_node = Counter(pod.node for pod in related)
    rank = {pod.uid: on_node[pod.node] for pod in pods}

    def compare(a: PodRecord, b: PodRecord) -> int:
        first = _first_three(a, b)
        if first:
            return first
        cost_a, cost_b = deletion_cost(a), deletion_cost(b)
        if cost_a != cost_b:
            return -1 if cost_a < cost_b else 1
        if rank[a.uid] != rank[b.uid]:
            return -1 if rank[a.uid] > rank[b.uid] else 1
        if a.phase == b.phase == RUNNING and a.running_at != b.running_at:
            assert a.running_at is not None and b.running_at is not None
            diff = _log_rank_diff(a.running_at, b.running_at, now)
            if diff == 0:
                return -1 if a.uid < b.uid else (1 if a.uid > b.uid else 0)
            return -1 if diff < 0 else 1
        return _creation(a, b)

    return sorted(pods, key=functools.cmp_to_key(compare))
