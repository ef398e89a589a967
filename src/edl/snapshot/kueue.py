"""Kueue's objects in a snapshot (ClusterQueues, LocalQueues, Workloads): what `edl plan`
reads of them, as the Autoscaler does on a live cluster (`edl.accounting.kueue`).

A queued job whose trainer Job is suspended (Kueue has not admitted it, or preempted
it) is not planned: starting it is Kueue's call; its reason quotes its Workload. A
queued job without a trainer Job yet waits for its master's and pservers' Workload
(`edl.accounting.kueue_servers`). An admitted elastic job is planned within what its
ClusterQueue, with its cohort, can still admit. Pure: snapshot items in, plain data out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edl.accounting.kueue import (
    JOB_UID_LABEL,
    admissible_trainers,
    cluster_queue_room,
    elastic,
    queued,
    workload_words,
)
from edl.accounting.kueue_servers import servers_workload_name

KINDS = ("ClusterQueue", "LocalQueue", "Workload")


@dataclass(frozen=True)
class KueueState:
    """The snapshot's Kueue objects (empty on a cluster without Kueue)."""

    cluster_queues: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    local_queues: dict[tuple[str, str], str] = field(default_factory=dict)  # -> ClusterQueue
    workloads: list[Mapping[str, Any]] = field(default_factory=list)


def kueue_state(items: list[dict[str, Any]]) -> KueueState:
    state = KueueState()
    for item in items:
        meta = item["metadata"]
        if item["kind"] == "ClusterQueue":
            state.cluster_queues[meta["name"]] = item
        elif item["kind"] == "LocalQueue":
            queue = str((item.get("spec") or {}).get("clusterQueue") or "")
            state.local_queues[(meta.get("namespace") or "default", meta["name"])] = queue
        elif item["kind"] == "Workload":
            state.workloads.append(item)
    return state


def _namespace(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("namespace") or "default"


def _workloads_of(state: KueueState, trainer: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The Workloads of a trainer Job: by Kueue's job-uid label or its ownerReference."""
    meta = trainer.get("metadata") or {}
    uid, name = meta.get("uid"), meta.get("name")
    found = []
    for workload in state.workloads:
        if _namespace(workload) != _namespace(trainer):
            continue
        wmeta = workload.get("metadata") or {}
        owners = wmeta.get("ownerReferences") or ()
        if (uid and (wmeta.get("labels") or {}).get(JOB_UID_LABEL) == uid) or any(
                o.get("kind") == "Job" and o.get("name") == name for o in owners):
            found.append(workload)
    return found


def waiting_reason(state: KueueState, job: Mapping[str, Any],
                   trainer: Mapping[str, Any] | None) -> str:
    """Why Kueue holds a queued job (nothing to plan), or "" when it does not."""
    if not queued(job):
        return ""
    if trainer is None:
        name = servers_workload_name(str(job["metadata"]["name"]))
        servers = [w for w in state.workloads if _namespace(w) == _namespace(job)
                   and w["metadata"]["name"] == name]
        if not servers:
            return ""
        words = workload_words(servers) or f"Kueue: workload {name} pending"
        return f"master and pservers waiting for admission: {words}"
    if not (trainer.get("spec") or {}).get("suspend"):
        return ""
    words = workload_words(_workloads_of(state, trainer)) or "Kueue has no Workload for it"
    return f"trainer Job suspended (queued by Kueue: starting it is Kueue's call): {words}"


def trainer_cap(state: KueueState, trainer: Mapping[str, Any],
                per_pod: Mapping[str, int]) -> int | None:
    """The most trainers Kueue can admit for an admitted elastic trainer Job; None when
    Kueue does not size it (not queued, not elastic, not admitted, no ClusterQueue)."""
    if not (queued(trainer) and elastic(trainer)):
        return None
    admitted = [w for w in _workloads_of(state, trainer)
                if ((w.get("status") or {}).get("admission") or {}).get("clusterQueue")
                and not any(c.get("type") == "Finished" and c.get("status") == "True"
                            for c in (w.get("status") or {}).get("conditions") or ())]
    if not admitted:
        return None
    admission = admitted[-1]["status"]["admission"]
    queue = state.cluster_queues.get(str(admission["clusterQueue"]))
    if queue is None:
        return None
    count = sum(int(a.get("count") or 0) for a in admission.get("podSetAssignments") or ())
    cohort_name = (queue.get("spec") or {}).get("cohortName")
    cohort = [q for q in state.cluster_queues.values()
              if cohort_name and (q.get("spec") or {}).get("cohortName") == cohort_name]
    return admissible_trainers(count, per_pod, cluster_queue_room(queue, cohort))
