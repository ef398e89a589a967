"""Kueue's batch/job integration on the in-process cluster (`edl.cluster.inproc.kueue`
holds the admission rules): a queued Job is created suspended, admitted by unsuspending
it with its flavor's node labels and tolerations in the template, preempted by
suspending it, and its quota given back when it finishes or shrinks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from edl.accounting.kueue import admissible_trainers, elastic
from edl.accounting.kueue_servers import Placement, ServersAdmission, servers_workload_name
from edl.api.names import object_key
from edl.cluster.inproc.kueue import (
    PRIORITY_LABEL,
    QUEUE_LABEL,
    ClusterQueue,
    KueueModel,
    ResourceFlavor,
    Workload,
    per_pod_request,
)
from edl.cluster.inproc.store import ObjectStore, copy_manifest
from edl.cluster.port import Manifest

__all__ = ["KueueIntegration"]
FINISHED = ("Complete", "Failed")


def _queue(job: Mapping[str, Any]) -> str:
    return str(((job.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) or "")


def _finished(job: Mapping[str, Any]) -> bool:
    return any(c.get("type") in FINISHED and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or ())


class KueueIntegration:
    """Mixed into `InProcessCluster`; off until `enable_kueue()`."""

    store: ObjectStore
    kueue: KueueModel | None = None
    _kueue_busy: bool = False

    def enable_kueue(self) -> KueueModel:
        """Run Kueue on this cluster: Jobs labelled with a LocalQueue are queued from now."""
        if self.kueue is None:
            self.kueue = KueueModel()
            self.store.listen("Job", self._kueue_job_event)
        return self.kueue

    def create_resource_flavor(self, flavor: ResourceFlavor) -> None:
        self.enable_kueue().flavors[flavor.name] = flavor

    def create_cluster_queue(self, queue: ClusterQueue) -> None:
        self.enable_kueue().cluster_queues[queue.name] = queue
        self._kueue_schedule()

    def create_local_queue(self, namespace: str, name: str, cluster_queue: str) -> None:
        self.enable_kueue().local_queues[(namespace, name)] = cluster_queue
        for workload in self.enable_kueue().workloads.values():
            if workload.namespace == namespace and workload.cluster_queue == "":
                workload.cluster_queue = cluster_queue
        self._kueue_schedule()

    def create_workload_priority_class(self, name: str, value: int) -> None:
        self.enable_kueue().priorities[name] = value

    def kueue_intake(self, job: Manifest) -> Manifest:
        """Kueue's Job webhook: a queued Job is created suspended."""
        if self.kueue is None or not _queue(job):
            return job
        job = copy_manifest(dict(job))
        job.setdefault("spec", {})["suspend"] = True
        return job

    async def queue_words(self, trainer: Manifest) -> str:
        """Why Kueue holds this Job, in Kueue's words ("" when not queued)."""
        if self.kueue is None or not _queue(trainer):
            return ""
        return self.kueue.words(object_key(trainer))

    async def servers_admission(self, job: Manifest, master: Manifest,
                                pserver: Manifest | None) -> ServersAdmission | None:
        """The servers' Workload (`edl.accounting.kueue_servers`) as Kueue would hold it:
        one Workload asking for the master and every pserver together."""
        model = self.kueue
        if model is None or not _queue(job):
            return None
        namespace, name = object_key(job)
        key = (namespace, servers_workload_name(name))
        if key not in model.workloads:
            labels = (job.get("metadata") or {}).get("labels") or {}
            cluster_queue = model.local_queues.get((namespace, _queue(job)), "")
            asks = dict.fromkeys(("cpu", "memory"), 0)
            for replica_set in (master, pserver):
                count = int(((replica_set or {}).get("spec") or {}).get("replicas") or 0)
                for resource, amount in per_pod_request(replica_set or {}).items():
                    asks[resource] += amount * count
            model.workloads[key] = Workload(
                namespace, key[1], cluster_queue,
                model.priorities.get(str(labels.get(PRIORITY_LABEL) or ""), 0),
                self.clock.now(), asks, 1,  # type: ignore[attr-defined]
                message="" if cluster_queue else f"LocalQueue {_queue(job)} doesn't exist")
            self._kueue_schedule()
        workload = model.workloads[key]
        if workload.admitted_count:
            queue = model.cluster_queues.get(workload.cluster_queue)
            flavor = model.flavors.get(queue.flavor) if queue is not None else None
            placed = Placement(dict(flavor.node_labels), [dict(t) for t in flavor.tolerations]
                               ) if flavor is not None else Placement()
            return ServersAdmission(True, words=model.words(key),
                                    placement={"master": placed, "pserver": placed})
        return ServersAdmission(False, workload.message.startswith("Preempted"),
                                model.words(key))

    async def release_servers(self, namespace: str, name: str) -> None:
        """The model requeued the evicted Workload already: only its words change."""
        workload = self.kueue.workloads.get((namespace, servers_workload_name(name))) \
            if self.kueue is not None else None
        if workload is not None and not workload.admitted_count:
            workload.message = ""

    async def finish_servers(self, namespace: str, name: str) -> None:
        if self.kueue is not None and self.kueue.workloads.pop(
                (namespace, servers_workload_name(name)), None) is not None:
            self._kueue_schedule()

    async def queue_room(self, trainer: Manifest) -> int | None:
        """The most trainers Kueue can admit for this elastic, admitted Job now."""
        model = self.kueue
        workload = model.workloads.get(object_key(trainer)) if model is not None else None
        if model is None or workload is None or not workload.admitted_count \
                or not elastic(trainer):
            return None
        return admissible_trainers(workload.admitted_count, workload.per_pod,
                                   model.room(workload.cluster_queue))

    # -- reacting to the store ------------------------------------------------------------
    def _kueue_job_event(self, event: str, obj: Manifest, old: Manifest | None) -> None:
        model = self.kueue
        if model is None or self._kueue_busy or not _queue(obj):
            return
        key = object_key(obj)
        if event == "DELETED" or _finished(obj):
            if model.workloads.pop(key, None) is not None:
                self._kueue_schedule()
            return
        spec = obj.get("spec") or {}
        count = int(spec.get("parallelism", 1))
        workload = model.workloads.get(key)
        if workload is None:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            cluster_queue = model.local_queues.get((key[0], _queue(obj)), "")
            model.workloads[key] = Workload(
                key[0], key[1], cluster_queue, model.priorities.get(
                    str(labels.get(PRIORITY_LABEL) or ""), 0),
                float((obj.get("metadata") or {}).get("creationTimestamp") or 0.0),
                per_pod_request(obj), count,
                message="" if cluster_queue else f"LocalQueue {_queue(obj)} doesn't exist")
            self._kueue_schedule()
        elif count != workload.count and not spec.get("suspend"):
            model.resize(key, count)
            self._kueue_schedule()

    def _kueue_schedule(self) -> None:
        model = self.kueue
        if model is None or self._kueue_busy:
            return
        with self._busy():
            decided = model.schedule()
            for workload in decided.evicted:
                self._set_suspend(workload, True)
            for workload in decided.admitted:
                self._set_suspend(workload, False)

    @contextlib.contextmanager
    def _busy(self) -> Iterator[None]:
        self._kueue_busy = True
        try:
            yield
        finally:
            self._kueue_busy = False

    def _set_suspend(self, workload: Workload, suspend: bool) -> None:
        """Unsuspend with the flavor's placement in the template, or suspend (StopJob:
        Kueue restores the template it had before admission)."""
        model = self.kueue
        job = self.store.peek("Job", *workload.key)
        if model is None or job is None:
            return
        job = copy_manifest(job)
        spec = job.setdefault("spec", {})
        spec["suspend"] = suspend
        pod = spec.setdefault("template", {}).setdefault("spec", {})
        queue = model.cluster_queues.get(workload.cluster_queue)
        flavor = model.flavors.get(queue.flavor) if queue is not None else None
        if flavor is not None:
            selector = dict(pod.get("nodeSelector") or {})
            tolerations = [t for t in pod.get("tolerations") or ()
                           if t not in flavor.tolerations]
            if suspend:
                for label in flavor.node_labels:
                    selector.pop(label, None)
            else:
                selector.update(flavor.node_labels)
                tolerations += [dict(t) for t in flavor.tolerations]
            pod["nodeSelector"] = selector
            pod["tolerations"] = tolerations
        self.store.replace("Job", job)
