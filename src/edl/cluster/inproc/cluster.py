"""`InProcessCluster`: an in-process Kubernetes-like cluster behind the `Cluster` port.

One object over the same manifests the JobParser emits, in three roles kept in
their own modules:

* the API (this module): the async `Cluster` port the Controller and Autoscaler
  use, and a synchronous admin API for the simulator, ``edl run`` and tests
  (submit TrainingJobs, scale Deployments, create/evict pods, sample);
* the workload controllers (`controllers`): ReplicaSet, Deployment, Job, GC;
* the pod lifecycle (`kubelet`) with the scheduler (`scheduler`).

Time comes from a `Clock` plug and pods run in a `PodRunner` plug, so
`edl simulate` (virtual clock, simulated pods) and `edl run` (real clock, real
processes) are this same code. Every object has optimistic concurrency
(`store`). Modelled as kube-scheduler and the API server do them (docs/fidelity.md):
taints and tolerations, `nodeSelector` and node affinity, PriorityClass with the
default preemption, ResourceQuota admission. Not modelled: rolling updates of a
Deployment's template (a Deployment owns its pods directly), pod (anti-)affinity,
PodDisruptionBudgets.

Speed: every question the Autoscaler or the simulator asks is answered from
counters kept on each transition (`OwnerPods`, the accounting `ResourceLedger`,
the scheduler's node index) — no scan over pods.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from edl.accounting import ClusterResource, NodeCapacity, ResourceLedger, pod_request
from edl.accounting.eligibility import node_facts
from edl.api.names import HOSTNAME_LABEL, job_key, object_key, trainer_job_name
from edl.api.quantity import cpu_milli, gpu_count, memory_mega
from edl.cluster.inproc.admission import AdmissionObjects
from edl.cluster.inproc.controllers import TRAINING_JOB, WorkloadControllers
from edl.cluster.inproc.kubelet import PodLifecycle, PodListener
from edl.cluster.inproc.managed import ManagedTrainerPods
from edl.cluster.inproc.pods import OwnerKey, OwnerPods, PodRecord
from edl.cluster.inproc.queueing import KueueIntegration
from edl.cluster.inproc.sampling import ClusterSample, ReplicaCounts, TrainerCounts
from edl.cluster.inproc.scheduler import Node, NodeIndex, Placement
from edl.cluster.inproc.simulated_pods import SimulatedPodRunner
from edl.cluster.inproc.store import ObjectStore, copy_manifest
from edl.cluster.inproc.training_job_watch import watch_training_jobs
from edl.cluster.inproc.workloads import (
    BACKOFF_BASE_S,
    BACKOFF_MAX_S,
    JOB_BACKOFF_MAX_S,
    managed_elsewhere,
)
from edl.cluster.port import (
    AlreadyExistsError,
    Clock,
    JobPods,
    Manifest,
    NotFoundError,
    PodRunner,
    TrainerPod,
    TrainingJobHandler,
    Unsubscribe,
)

log = logging.getLogger(__name__)


def _sample_key(namespace: str, name: str) -> str:
    return name if namespace == "default" else f"{namespace}/{name}"


class InProcessCluster(ManagedTrainerPods, AdmissionObjects, KueueIntegration):
    """The in-process control plane; implements `edl.cluster.port.Cluster`.

    Args:
        clock: time source (`VirtualClock` for simulation, `AsyncioClock` for real time).
        pod_runner: runs bound pods; default `SimulatedPodRunner(clock, Random(seed))`.
        placement: "spread" (kube-scheduler default) or "binpack".
        seed: seeds the default pod runner's random draws.
        backoff_base_s, backoff_max_s: the failed-pod back-off's first delay (10 s,
            doubling) and its cap for ReplicaSet pods (5 min, CrashLoopBackOff);
        job_backoff_max_s: the Job controller's cap (10 min). Local runs shorten them
            so a crashing script reaches its Job's backoffLimit in seconds, not minutes.

    Build it, add nodes, then use it from coroutines running on ``clock``'s
    event loop (pod lifecycles are timers/callbacks on that loop).
    """

    def __init__(
        self,
        clock: Clock,
        pod_runner: PodRunner | None = None,
        *,
        placement: Placement = "spread",
        seed: int = 0,
        backoff_base_s: float = BACKOFF_BASE_S,
        backoff_max_s: float = BACKOFF_MAX_S,
        job_backoff_max_s: float = JOB_BACKOFF_MAX_S,
    ) -> None:
        self.clock = clock
        self.pod_runner: PodRunner = pod_runner or SimulatedPodRunner(clock, random.Random(seed))
        self.store = ObjectStore(clock.now)
        self.ledger = ResourceLedger()
        self.nodes = NodeIndex(placement, seed)
        self._owners: dict[OwnerKey, OwnerPods] = {}
        self._unschedulable_listeners: list[Callable[[], None]] = []
        self.pods = PodLifecycle(
            clock, self.pod_runner, self.nodes, self.ledger, self._owners, self._unschedulable
        )
        self.scheduler = self.pods.scheduler
        self.controllers = WorkloadControllers(
            clock, self.store, self.pods, self._owners, backoff_base_s, backoff_max_s,
            job_backoff_base_s=backoff_base_s, job_backoff_max_s=job_backoff_max_s,
        )
        self._cpu_total_milli = 0
        self.template_defaults: dict[tuple[str, str], dict[str, Any]] = {}
        # the trainer controller's crash back-off here (first delay, cap): a local run's
        # short values reach it too
        self.crash_backoff_s = (backoff_base_s, job_backoff_max_s)
        self._trainer_view()  # the trainer pod watch starts with the cluster

    # ================================================================ nodes
    def add_node(
        self,
        name: str,
        allocatable: Mapping[str, Any],
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
    ) -> None:
        """Add a node with ``allocatable`` resources (``{"cpu": "16", "memory": "128Gi"}``),
        labels and taints (``{"key", "value", "effect"}``, as a Node's ``spec.taints``)."""
        if name in self.nodes.by_name:
            raise AlreadyExistsError("Node", "", name, "already exists")
        gpu_name = next(
            (n for n in ("nvidia.com/gpu", "alpha.kubernetes.io/nvidia-gpu") if n in allocatable),
            None,
        )
        capacity = NodeCapacity(
            cpu_milli=cpu_milli(allocatable.get("cpu", 0), f"node {name}: allocatable.cpu"),
            memory_mega=memory_mega(
                allocatable.get("memory", 0), f"node {name}: allocatable.memory"
            ),
            gpu=gpu_count(allocatable[gpu_name], f"node {name}: allocatable.{gpu_name}")
            if gpu_name
            else 0,
        )
        all_labels = {HOSTNAME_LABEL: name, **(labels or {})}  # as a kubelet labels its node
        facts = node_facts({"metadata": {"name": name, "labels": all_labels},
                            "spec": {"taints": list(taints)}})
        node = Node(
            name, len(self.nodes.nodes), capacity.cpu_milli, capacity.memory_mega, capacity.gpu,
            all_labels, facts,
        )
        self.nodes.add(node)
        self.ledger.set_node(name, capacity, facts=facts)
        self._cpu_total_milli += capacity.cpu_milli
        self.scheduler.room_freed()

    def node_names(self) -> list[str]:
        return [node.name for node in self.nodes.nodes]

    def node_room(self, name: str) -> tuple[int, int, int]:
        """(free CPU milli, free memory mega, free GPUs) of a node."""
        node = self.nodes.by_name[name]
        return node.free_cpu_milli, node.free_memory_mega, node.free_gpu

    # ================================================================ Cluster port: children
    async def create_job(self, job: Manifest) -> Manifest:
        return self.store.create("Job", self.kueue_intake(self.with_template_defaults(job)))

    async def create_replica_set(self, replica_set: Manifest) -> Manifest:
        return self.store.create("ReplicaSet", replica_set)

    async def get_replica_set(self, namespace: str, name: str) -> Manifest:
        return self._read("ReplicaSet", namespace, name)

    async def delete_replica_set(self, namespace: str, name: str) -> None:
        self.store.delete("ReplicaSet", namespace, name)

    async def scale_replica_set(self, namespace: str, name: str, replicas: int) -> None:
        self._read("ReplicaSet", namespace, name)  # NotFoundError
        self.scale("ReplicaSet", namespace, name, replicas)

    async def create_service(self, service: Manifest) -> Manifest:
        return self.store.create("Service", service)

    async def delete_service(self, namespace: str, name: str) -> None:
        self.store.delete("Service", namespace, name)

    async def get_trainer_job(self, job: Any) -> Manifest:
        namespace, name = job_key(job)
        return await self.get_trainer_job_by_name(namespace, trainer_job_name(name))

    async def get_trainer_job_by_name(self, namespace: str, name: str) -> Manifest:
        return self._read("Job", namespace, name)

    async def update_trainer_job(self, job: Manifest) -> Manifest:
        return self.controllers.with_status("Job", self.store.replace("Job", job))

    async def delete_trainer_job(self, namespace: str, name: str) -> None:
        self.store.delete("Job", namespace, name)

    # ---------------------------------------------------- optional: VictimScaling
    async def trainer_pods(self, job: Any, leaving: bool = False) -> list[TrainerPod]:
        namespace, name = job_key(job)
        owner = self._trainer_owner(namespace, name)
        if owner is None:
            return []
        return [
            TrainerPod(pod.name, pod.node or "", pod.terminating)
            for pod in owner.pods.values()
            if leaving or not pod.terminating
        ]

    async def scale_trainer_job(self, job: Manifest, victims: list[str]) -> Manifest:
        """Replace the Job and delete the victims in one step (no await in between):
        the Job controller's reconcile, which runs later on the loop, then finds the
        active count already at parallelism and picks no victims of its own. A managed
        Job gets them named instead (`ManagedTrainerPods.name_victims`)."""
        if managed_elsewhere(job.get("spec") or {}):
            return self.controllers.with_status("Job", self.name_victims(job, victims))
        stored = self.store.replace("Job", job)  # ConflictError before any pod is touched
        namespace = stored["metadata"]["namespace"]
        owner_key = ("Job", namespace, stored["metadata"]["name"])
        for pod_name in victims:
            pod = self.pods.by_key.get((namespace, pod_name))
            if pod is not None and pod.owner == owner_key:
                self.pods.delete(pod)
        return self.controllers.with_status("Job", stored)

    # ================================================================ Cluster port: observation
    async def job_pods(self, job: Any) -> JobPods:
        namespace, name = job_key(job)
        owner = self._trainer_owner(namespace, name)
        if owner is None:
            return JobPods(0, 0, 0, 0, 0)
        return JobPods(
            owner.active, owner.running, owner.pending, owner.unbound, owner.terminating
        )

    async def inquiry_resource(self) -> ClusterResource:
        snapshot = self.ledger.snapshot()
        if not self.pods.quotas:
            return snapshot
        return replace(snapshot, quotas=self.quota_rooms())

    # ================================================================ Cluster port: TrainingJobs
    async def update_training_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        self.store.update_status(TRAINING_JOB, namespace, name, status)

    def watch_training_jobs(self, handler: TrainingJobHandler) -> Unsubscribe:
        """Deliver TrainingJob events to ``handler`` in order, from a task on the running loop
        (`training_job_watch`)."""
        return watch_training_jobs(self.store, handler)

    def watch_unschedulable(self, callback: Callable[[], None]) -> Unsubscribe:
        self._unschedulable_listeners.append(callback)
        return lambda: self._unschedulable_listeners.remove(callback)

    # ================================================================ TrainingJob objects
    def create_training_job(self, job: Mapping[str, Any]) -> Manifest:
        """Submit a TrainingJob (what ``kubectl apply`` of the CRD object does)."""
        return self.store.create(TRAINING_JOB, job)

    def delete_training_job(self, namespace: str, name: str) -> None:
        self.store.delete(TRAINING_JOB, namespace, name)

    def get_training_job(self, namespace: str, name: str) -> Manifest:
        return self.store.get(TRAINING_JOB, namespace, name)

    def replace_training_job(self, job: Mapping[str, Any]) -> Manifest:
        return self.store.replace(TRAINING_JOB, job)

    def list_training_jobs(self) -> list[Manifest]:
        return [copy_manifest(obj) for obj in self.store.items(TRAINING_JOB)]

    # ================================================================ other workloads
    def create_deployment(self, deployment: Mapping[str, Any]) -> Manifest:
        return self.store.create("Deployment", deployment)

    def get_deployment(self, namespace: str, name: str) -> Manifest:
        return self._read("Deployment", namespace, name)

    def delete_deployment(self, namespace: str, name: str) -> None:
        self.store.delete("Deployment", namespace, name)

    def scale(self, kind: str, namespace: str, name: str, replicas: int) -> Manifest:
        """Set ``spec.replicas`` (``spec.parallelism`` for a Job), like ``kubectl scale``."""
        obj = self.store.get(kind, namespace, name)
        obj["spec"]["parallelism" if kind == "Job" else "replicas"] = replicas
        return self.store.replace(kind, obj)

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> Manifest:
        return self.scale("Deployment", namespace, name, replicas)

    def create_pod(self, pod: Mapping[str, Any]) -> Manifest:
        """Create a bare pod (system or background load). A set ``spec.nodeName`` pins it."""
        namespace, name = object_key(pod)
        if (namespace, name) in self.pods.by_key:
            raise AlreadyExistsError("Pod", namespace, name, "already exists")
        manifest = copy_manifest(dict(pod))
        manifest.setdefault("metadata", {})["namespace"] = namespace
        record = self.pods.create(manifest, pod_request(manifest), None)
        return copy_manifest(record.manifest)

    def delete_pod(self, namespace: str, name: str) -> None:
        pod = self.pods.by_key.get((namespace, name))
        if pod is None:
            raise NotFoundError("Pod", namespace, name)
        self.pods.delete(pod)

    def evict_pod(self, namespace: str, name: str, reason: str = "EvictionByEvictionAPI") -> None:
        """Delete a pod as the eviction API does: first mark it ``DisruptionTarget``.

        A Job whose podFailurePolicy ignores that condition does not count the
        pod's failure, whatever its exit code (chaos tests, node drains).
        """
        pod = self.pods.by_key.get((namespace, name))
        if pod is None:
            raise NotFoundError("Pod", namespace, name)
        status = pod.manifest["status"]
        condition = {"type": "DisruptionTarget", "status": "True", "reason": reason}
        status["conditions"] = [*(status.get("conditions") or ()), condition]
        self.pods.delete(pod)

    async def last_trainer_failure(self, job: Any) -> str:
        """``<pod> (exit <code>): <last line of its termination message>``, one line, of the
        last counted failure of a job's trainers; "" if none (optional `Cluster` extra that
        the Controller puts in a Failed status)."""
        namespace, name = job_key(job)
        owner = self._trainer_owner(namespace, name)
        return owner.last_failure if owner is not None else ""

    def get_pod(self, namespace: str, name: str) -> Manifest:
        pod = self.pods.by_key.get((namespace, name))
        if pod is None:
            raise NotFoundError("Pod", namespace, name)
        return copy_manifest(pod.manifest)

    def list_pods(self, namespace: str | None = None) -> list[Manifest]:
        """Copies of every live pod (O(pods): for tests and inspection, not for sampling)."""
        return [
            copy_manifest(pod.manifest)
            for pod in self.pods.pods.values()
            if namespace is None or pod.namespace == namespace
        ]

    def pod_records(self) -> Iterable[PodRecord]:
        """The live pods themselves (read-only), O(pods)."""
        return list(self.pods.pods.values())

    # ================================================================ sampling
    def watch_pods(self, listener: PodListener) -> Unsubscribe:
        """Call ``listener(event, pod)`` synchronously on each pod transition."""
        self.pods.listeners.append(listener)
        return lambda: self.pods.listeners.remove(listener)

    def trainer_counts(self, namespace: str, name: str) -> TrainerCounts:
        """Trainers of one TrainingJob right now."""
        job = self.store.peek("Job", namespace, trainer_job_name(name))
        owner = self._trainer_owner(namespace, name)
        desired = int((job or {}).get("spec", {}).get("parallelism", 1)) if job else 0
        key = (namespace, name)
        if owner is None:
            return TrainerCounts(desired, 0, 0, 0, self.pods.first_pod_at.get(key), None)
        return TrainerCounts(
            desired,
            owner.running,
            owner.pending,
            owner.terminating,
            self.pods.first_pod_at.get(key),
            self.pods.first_running_at.get(key),
        )

    def replica_counts(self, kind: str, namespace: str, name: str) -> ReplicaCounts:
        obj = self.store.peek(kind, namespace, name)
        owner = self._owners.get((kind, namespace, name))
        desired = int(obj["spec"].get("replicas", 1)) if obj else 0
        if owner is None:
            return ReplicaCounts(desired, 0, 0, 0)
        return ReplicaCounts(desired, owner.running, owner.pending, owner.terminating)

    def sample(self) -> ClusterSample:
        """The cluster at this instant, for utilisation, pending and lag metrics."""
        trainers = {}
        for obj in self.store.items(TRAINING_JOB):
            namespace, name = object_key(obj)
            trainers[_sample_key(namespace, name)] = self.trainer_counts(namespace, name)
        deployments = {}
        for obj in self.store.items("Deployment"):
            namespace, name = object_key(obj)
            deployments[_sample_key(namespace, name)] = self.replica_counts(
                "Deployment", namespace, name
            )
        return ClusterSample(
            time=self.clock.now(),
            cpu_total_milli=self._cpu_total_milli,
            running_cpu_request_milli=self.pods.running_cpu_milli,
            requested_cpu_milli=self.pods.requested_cpu_milli,
            running_pods=self.pods.running_pods,
            pending_pods=len(self.pods.pods) - self.pods.running_pods,
            unbound_pods=len(self.scheduler.queue),
            trainers=trainers,
            deployments=deployments,
            running_cpu_by_node=dict(self.pods.running_cpu_by_node),
        )

    # ================================================================ events
    def _read(self, kind: str, namespace: str, name: str) -> Manifest:
        """A workload with its live status (`NotFoundError` if missing)."""
        return self.controllers.with_status(kind, self.store.get(kind, namespace, name))

    def _trainer_owner(self, namespace: str, name: str) -> OwnerPods | None:
        return self._owners.get(("Job", namespace, trainer_job_name(name)))

    def _unschedulable(self) -> None:
        for callback in list(self._unschedulable_listeners):
            try:
                callback()
            except Exception:
                log.exception("unschedulable listener failed")
