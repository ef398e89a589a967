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


def _condition(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (workload.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            return condition
    return None


def _true(workload: Mapping[str, Any], kind: str) -> bool:
    condition = _condition(workload, kind)
    return condition is not None and condition.get("status") == "True"


def _created(workload: Mapping[str, Any]) -> str:
    return str((workload.get("metadata") or {}).get("creationTimestamp") or "")


def workload_words(workloads: Iterable[Mapping[str, Any]]) -> str:
    """A queued job's state in Kueue's words, from the Workloads of its trainer Job (the
    newest unfinished one: with slices, the replacement being admitted); "" if none."""
    live = [w for w in workloads if not _true(w, "Finished")]
    if not live:
        return ""
    workload = max(live, key=_created)
    name = (workload.get("metadata") or {}).get("name", "")
    evicted = _condition(workload, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        return f"Kueue evicted workload {name}: {evicted.get('message') or evicted.get('reason')}"
    if _true(workload, "Admitted"):
        queue = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
        return f"Kueue admitted workload {name} to ClusterQueue {queue}"
    reserved = _condition(workload, "QuotaReserved")
    if reserved is not None and reserved.get("message"):
        return f"Kueue: {reserved['message']}"
    return f"Kueue: workload {name} pending"
