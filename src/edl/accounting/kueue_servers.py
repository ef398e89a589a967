"""The servers' Workload (pure): a queued TrainingJob's master and pservers counted
against its ClusterQueue.

Kueue's batch/job integration queues only the trainer Job. The master and pserver
ReplicaSets are kinds Kueue does not integrate, so edl owns one Workload per queued
TrainingJob, ``<job>-servers``, with a PodSet ``master`` (1 pod) and one ``pserver``
(``pserver.min-instance`` pods), in the job's LocalQueue at its WorkloadPriorityClass.
edl does the job side of Kueue's contract for it: no child of the job (Service,
master, pservers, trainer Job) exists before it is admitted; the ResourceFlavor's node
labels and tolerations of its admission go into the master's and pservers' pods; on an
eviction the children are deleted and the quota reservation cleared (as Kueue's
jobframework reconciler does for the Jobs it integrates: ``QuotaReserved`` False,
``admission`` removed, ``Admitted`` False, ``Requeued`` True), so the Workload queues
again; a finished job's Workload is deleted, giving its quota back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from edl.accounting.kueue import PRIORITY_LABEL, QUEUE_LABEL
from edl.accounting.kueue import condition as _condition
from edl.accounting.kueue import condition_true as _true

SERVERS_SUFFIX = "-servers"
WORKLOAD_API = "kueue.x-k8s.io/v1beta2"


def servers_workload_name(job: str) -> str:
    return f"{job}{SERVERS_SUFFIX}"


@dataclass(frozen=True)
class Placement:
    """What a ResourceFlavor's admission puts into a PodSet's pods."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class ServersAdmission:
    """The servers' Workload as edl acts on it: ``admitted`` (children may run, placed by
    ``placement`` per role), ``evicted`` (children must go, then the reservation is
    cleared) or neither (waiting: ``words`` says why, in Kueue's words)."""

    admitted: bool
    evicted: bool = False
    words: str = ""
    placement: Mapping[str, Placement] = field(default_factory=dict)


def servers_workload(job: Mapping[str, Any], master: Mapping[str, Any],
                     pserver: Mapping[str, Any] | None,
                     priority: int | None) -> dict[str, Any]:
    """The Workload of a queued TrainingJob's master and pservers (`job`: its stored
    manifest; `master`/`pserver`: their ReplicaSets as the JobParser makes them)."""
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    name = str(meta.get("name"))
    pod_sets = [_pod_set("master", master)]
    if pserver is not None:
        pod_sets.append(_pod_set("pserver", pserver))
    spec: dict[str, Any] = {"queueName": labels[QUEUE_LABEL], "podSets": pod_sets}
    if labels.get(PRIORITY_LABEL):
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                    "name": labels[PRIORITY_LABEL]}
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": WORKLOAD_API, "kind": "Workload",
        "metadata": {
            "name": servers_workload_name(name), "namespace": meta.get("namespace") or "default",
            "labels": {"edl.dev/job": name, "edl.dev/role": "servers"},
            "ownerReferences": [{"apiVersion": "edl.dev/v1", "kind": "TrainingJob",
                                 "name": name, "uid": meta.get("uid"), "controller": True,
                                 "blockOwnerDeletion": True}]},
        "spec": spec,
    }


def _pod_set(name: str, replica_set: Mapping[str, Any]) -> dict[str, Any]:
    spec = replica_set.get("spec") or {}
    template = spec.get("template") or {}
    return {"name": name, "count": int(spec.get("replicas") or 1),
            "template": {"metadata": {"labels": (template.get("metadata") or {}).get("labels")
                                      or {}},
                         "spec": template.get("spec") or {}}}


def admission_of(workload: Mapping[str, Any],
                 flavors: Mapping[str, Mapping[str, Any]]) -> ServersAdmission:
    """What edl does with its servers' Workload (`flavors`: ResourceFlavor name -> object,
    for those its admission names)."""
    name = (workload.get("metadata") or {}).get("name", "")
    admission = (workload.get("status") or {}).get("admission")
    evicted = _condition(workload, "Evicted") or {}
    if _true(workload, "Evicted") and (admission or _true(workload, "QuotaReserved")):
        return ServersAdmission(False, True, f"Kueue evicted workload {name}: "
                                f"{evicted.get('message') or evicted.get('reason')}")
    if admission and _true(workload, "Admitted") and not _true(workload, "Evicted"):
        return ServersAdmission(True, words=f"Kueue admitted workload {name}",
                                placement=placements(admission, flavors))
    reserved = _condition(workload, "QuotaReserved")
    if reserved is not None and reserved.get("message"):
        return ServersAdmission(False, words=f"Kueue: {reserved['message']}")
    return ServersAdmission(False, words=f"Kueue: workload {name} pending")


def admitted_flavors(workload: Mapping[str, Any]) -> set[str]:
    """The ResourceFlavors an admitted Workload was assigned (to read their placement)."""
    admission = (workload.get("status") or {}).get("admission") or {}
    return {str(flavor) for assignment in admission.get("podSetAssignments") or ()
            for flavor in (assignment.get("flavors") or {}).values()}


def placements(admission: Mapping[str, Any],
               flavors: Mapping[str, Mapping[str, Any]]) -> dict[str, Placement]:
    """Per PodSet, its flavors' node labels and tolerations (merged, as Kueue merges
    them into an integrated Job's pod template)."""
    out = {}
    for assignment in admission.get("podSetAssignments") or ():
        selector: dict[str, str] = {}
        tolerations: list[dict[str, Any]] = []
        for flavor_name in sorted(set((assignment.get("flavors") or {}).values())):
            flavor = (flavors.get(flavor_name) or {}).get("spec") or {}
            selector.update({str(k): str(v) for k, v in (flavor.get("nodeLabels") or {}).items()})
            tolerations.extend(t for t in flavor.get("tolerations") or ()
                               if t not in tolerations)
        out[str(assignment.get("name"))] = Placement(selector, tolerations)
    return out


def place(replica_set: dict[str, Any], placement: Placement | None) -> dict[str, Any]:
    """`replica_set` with its pods placed where the admission put them."""
    if placement is None or not (placement.node_selector or placement.tolerations):
        return replica_set
    pod = replica_set["spec"]["template"].setdefault("spec", {})
    pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **placement.node_selector}
    known = list(pod.get("tolerations") or ())
    pod["tolerations"] = known + [t for t in placement.tolerations if t not in known]
    return replica_set


def released_status(workload: Mapping[str, Any], now: datetime | None = None
                    ) -> dict[str, Any]:
    """The status that gives an evicted Workload's quota back and queues it again (the
    job side of Kueue's eviction; its jobframework writes the same)."""
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    generation = (workload.get("metadata") or {}).get("generation") or 0
    evicted = _condition(workload, "Evicted") or {}
    message = str(evicted.get("message") or "evicted")
    reason = str(evicted.get("reason") or "Evicted")
    changes = {
        "QuotaReserved": ("False", "PendingEvaluation", message),
        "Admitted": ("False", "NoReservation", "The workload has no reservation"),
        "Requeued": ("True", reason, message),
    }
    conditions = _replaced((workload.get("status") or {}).get("conditions") or (), changes,
                           stamp, generation)
    return {"admission": None, "conditions": conditions}


def _replaced(conditions: Iterable[Mapping[str, Any]],
              changes: Mapping[str, tuple[str, str, str]], stamp: str,
              generation: int) -> list[dict[str, Any]]:
    out, seen = [], set()
    for condition in conditions:
        kind = condition.get("type")
        if kind in changes:
            seen.add(kind)
            condition = _set(condition, changes[str(kind)], stamp, generation)
        out.append(dict(condition))
    for kind, change in changes.items():
        if kind not in seen:
            out.append(_set({"type": kind}, change, stamp, generation))
    return out


def _set(condition: Mapping[str, Any], change: tuple[str, str, str], stamp: str,
         generation: int) -> dict[str, Any]:
    status, reason, message = change
    moved = condition.get("status") != status
    return {**condition, "status": status, "reason": reason, "message": message[:32768],
            "observedGeneration": generation,
            "lastTransitionTime": stamp if moved or not condition.get("lastTransitionTime")
            else condition["lastTransitionTime"]}
