"""What edl knows of Kueue's batch Job contract (pure): labels, the elastic opt-in, and a
Workload's state in Kueue's words.

A TrainingJob labelled with a LocalQueue has its trainer Job queued by Kueue's batch/job
integration (docs/kubernetes.md, "Kueue"). Kueue then owns the trainer Job's size: its
Workload was admitted for ``parallelism`` pods, and a Job whose parallelism no longer
matches its admitted Workload is suspended and requeued, every trainer deleted
(Kueue's jobframework reconciler: the equivalence check, then ``StopJob``). Two cases:

* **elastic** (``min-instance < max-instance``): the trainer Job carries
  ``kueue.x-k8s.io/elastic-job: "true"`` (Kueue's ElasticJobsViaWorkloadSlices, beta
  and on by default from v0.18). A changed parallelism is then a Kueue resize: a
  shrink edits the Workload's count in place (quota given back), a growth is a new
  Workload slice charged only for the extra pods, and every new pod waits behind the
  ``kueue.x-k8s.io/elastic-job`` scheduling gate until that slice is admitted — so
  trainers beyond what Kueue admitted never run;
* **fixed** (``min-instance == max-instance``): the Autoscaler never changes its size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"
ELASTIC_GATE = "kueue.x-k8s.io/elastic-job"  # the pods' scheduling gate, same name
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # on each Workload: the uid of the Job it queues


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def queued(trainer: Mapping[str, Any]) -> bool:
    """Whether Kueue queues this trainer Job (it names a LocalQueue)."""
    return bool(_labels(trainer).get(QUEUE_LABEL))


def elastic(trainer: Mapping[str, Any]) -> bool:
    """Whether Kueue resizes this trainer Job through Workload slices."""
    return str(_annotations(trainer).get(ELASTIC_ANNOTATION, "")).lower() == "true"


def size_is_kueues(trainer: Mapping[str, Any]) -> bool:
    """A queued trainer Job whose size only Kueue's admission sets: never resized by
    the Autoscaler (a resize would make Kueue suspend and requeue the whole job)."""
    return queued(trainer) and not elastic(trainer)


def condition(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The Workload's status condition of this type, if any."""
    for condition in (workload.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            return condition
    return None


def condition_true(workload: Mapping[str, Any], kind: str) -> bool:
    found = condition(workload, kind)
    return found is not None and found.get("status") == "True"


def _created(workload: Mapping[str, Any]) -> str:
    return str((workload.get("metadata") or {}).get("creationTimestamp") or "")


def workload_words(workloads: Iterable[Mapping[str, Any]]) -> str:
    """A queued job's state in Kueue's words, from the Workloads of its trainer Job (the
    newest unfinished one: with slices, the replacement being admitted); "" if none."""
    live = [w for w in workloads if not condition_true(w, "Finished")]
    if not live:
        return ""
    workload = max(live, key=_created)
    name = (workload.get("metadata") or {}).get("name", "")
    evicted = condition(workload, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        return f"Kueue evicted workload {name}: {evicted.get('message') or evicted.get('reason')}"
    if condition_true(workload, "Admitted"):
        queue = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
        return f"Kueue admitted workload {name} to ClusterQueue {queue}"
    reserved = condition(workload, "QuotaReserved")
    if reserved is not None and reserved.get("message"):
        return f"Kueue: {reserved['message']}"
    return f"Kueue: workload {name} pending"


def _resource_amounts(resources: Iterable[Mapping[str, Any]], key: str) -> dict[str, int]:
    """{resource: amount} of Kueue resource entries (cpu in milli-CPU, memory in MB)."""
    from edl.api.quantity import cpu_milli, memory_mega

    out: dict[str, int] = {}
    for entry in resources:
        name, value = str(entry.get("name")), entry.get(key)
        if value is None or name not in ("cpu", "memory"):
            continue
        amount = cpu_milli(value) if name == "cpu" else memory_mega(value)
        out[name] = out.get(name, 0) + amount
    return out


def _quota(queue: Mapping[str, Any], key: str) -> dict[str, int] | None:
    """A ClusterQueue's summed ``nominalQuota`` or ``borrowingLimit`` over its flavors
    (None: no flavor states a borrowing limit: borrow what the cohort has)."""
    entries = [r for group in (queue.get("spec") or {}).get("resourceGroups") or ()
               for flavor in group.get("flavors") or () for r in flavor.get("resources") or ()]
    if key == "borrowingLimit" and not any(key in r for r in entries):
        return None
    return _resource_amounts(entries, key)


def _used(queue: Mapping[str, Any]) -> dict[str, int]:
    return _resource_amounts(
        [r for flavor in (queue.get("status") or {}).get("flavorsReservation") or ()
         for r in flavor.get("resources") or ()], "total")


def cluster_queue_room(queue: Mapping[str, Any],
                       cohort: Iterable[Mapping[str, Any]] = ()) -> dict[str, int]:
    """What a ClusterQueue can still admit (milli-CPU, MB), as Kueue computes it for one
    flavor: in a cohort, what the members' nominal quotas leave unused, at most up to
    its own nominal quota plus its ``borrowingLimit`` (`cohort`: every member, itself
    included; empty: none). Lending limits are not read."""
    nominal, used = _quota(queue, "nominalQuota") or {}, _used(queue)
    members = list(cohort) or [queue]
    limit = _quota(queue, "borrowingLimit")
    room = {}
    for resource in ("cpu", "memory"):
        free = sum((_quota(q, "nominalQuota") or {}).get(resource, 0)
                   - _used(q).get(resource, 0) for q in members)
        if limit is not None:
            free = min(free, nominal.get(resource, 0) + limit.get(resource, 0)
                       - used.get(resource, 0))
        room[resource] = max(free, 0)
    return room


def admissible_trainers(admitted: int, per_pod: Mapping[str, int],
                        room: Mapping[str, int]) -> int:
    """The trainer count Kueue can admit for a job holding ``admitted`` pods: those plus
    as many more as ``room`` holds (a growth slice is admitted whole or not at all)."""
    more = [room.get(r, 0) // amount for r, amount in per_pod.items() if amount > 0]
    return admitted + (min(more) if more else 0)
