"""`InProcessCluster`: an in-process Kubernetes-like control plane behind the `Cluster` port.

One object plays API server, scheduler, kubelet bookkeeping and the
ReplicaSet/Deployment/Job controllers, over the same manifests the JobParser
emits. Time comes from a `Clock` plug and pods run in a `PodRuntime` plug, so
`edl simulate` (virtual clock, simulated pods) and `edl run` (real clock, real
processes) are this same code.

Semantics kept from Kubernetes because the autoscaler's behaviour depends on them:

* scheduling by requests; pods that fit nowhere stay Pending and are retried
  whenever room frees (`scheduler`);
* a controller scaling down deletes unscheduled, then pending, then the newest
  running pods first;
* a deleted pod keeps its phase and its node's room until its containers have
  exited (at most its grace period, ``terminationGracePeriodSeconds``, 30 s);
* a failed pod is replaced after a back-off (10 s, doubling, at most 5 min), as
  CrashLoopBackOff and the Job controller do, so a crashing process cannot spin;
* a Job without ``completions`` completes once one pod has exited 0 and none is
  left running; a Job whose pods failed more than ``backoffLimit`` (default 6)
  times fails (condition Failed, reason ``BackoffLimitExceeded``; its other pods
  are deleted). A failure counts unless the Job's ``podFailurePolicy`` says
  ``Ignore`` (exit codes, pod conditions such as ``DisruptionTarget`` set by
  `evict_pod`); ``FailJob`` fails the Job at once. As in Kubernetes, a deleted
  Job pod that exits non-zero is a failure too (that is why trainers drained by
  SIGTERM exit 143 and their Job ignores 143); a pod deleted before it was bound
  never counts. The pod's exit code and the runtime's termination message (if
  it keeps one) go to its ``status.containerStatuses``;
* optimistic concurrency on every object (`store`).

Not modelled: rolling updates of a Deployment's template (a Deployment owns its
pods directly), node selectors/affinity, taints, priorities, preemption.

Speed: every question the Autoscaler or the simulator asks is answered from
counters kept on each transition (`OwnerPods`, the accounting `ResourceLedger`,
the scheduler's node index) — no scan over pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from edl.accounting import ClusterResource, NodeCapacity, ResourceLedger, pod_request
from edl.api.quantity import cpu_milli, gpu_count, memory_mega
from edl.cluster.inproc.pods import (
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    OwnerKey,
    OwnerPods,
    PodRecord,
)
from edl.cluster.inproc.runtime import SimulatedPodRuntime
from edl.cluster.inproc.sampling import ClusterSample, ReplicaCounts, TrainerCounts
from edl.cluster.inproc.scheduler import Node, NodeIndex, Placement, Scheduler
from edl.cluster.inproc.store import ObjectStore, copy_manifest, object_key
from edl.cluster.inproc.workloads import (
    BACKOFF_BASE_S,
    BACKOFF_MAX_S,
    BACKOFF_RESET_S,
    FAIL_JOB,
    IGNORE,
    POD_FAILURE_POLICY,
    crash_backoff_s,
    owner_status,
    pod_failure_action,
    pod_from_template,
    wanted_pods,
)
from edl.cluster.port import (
    AlreadyExistsError,
    Clock,
    JobPods,
    Manifest,
    NotFoundError,
    PodRuntime,
    TrainerPod,
    TrainingJobHandler,
    Unsubscribe,
)

log = logging.getLogger(__name__)

DEFAULT_GRACE_PERIOD_S = 30.0
LAST_FAILURE_CHARS = 500  # of a failed pod's message, kept for the TrainingJob's status
TRAINING_JOB = "TrainingJob"
WORKLOAD_KINDS = ("ReplicaSet", "Deployment", "Job")
PodListener = Callable[[str, PodRecord], None]
"""Called with ("created"|"bound"|"running"|"deleting"|"exited", pod). Read, do not keep."""


def _sample_key(namespace: str, name: str) -> str:
    return name if namespace == "default" else f"{namespace}/{name}"


def _job_ref(job: Any) -> tuple[str, str]:
    """(namespace, name) of a TrainingJob model or manifest dict."""
    if isinstance(job, Mapping):
        return object_key(job)
    metadata = job.metadata
    return metadata.namespace or "default", metadata.name or ""


class InProcessCluster:
    """The in-process control plane; implements `edl.cluster.port.Cluster`.

    Args:
        clock: time source (`VirtualClock` for simulation, `AsyncioClock` for real time).
        runtime: runs bound pods; default `SimulatedPodRuntime(clock, Random(seed))`.
        placement: "spread" (kube-scheduler default) or "binpack".
        seed: seeds the default runtime's random draws.
        backoff_base_s, backoff_max_s: the failed-pod replacement back-off (10 s
            doubling up to 5 min, as Kubernetes); local runs shorten it so a
            crashing script reaches its Job's backoffLimit in seconds, not minutes.

    Build it, add nodes, then use it from coroutines running on ``clock``'s
    event loop (pod lifecycles are timers/callbacks on that loop).
    """

    def __init__(
        self,
        clock: Clock,
        runtime: PodRuntime | None = None,
        *,
        placement: Placement = "spread",
        seed: int = 0,
        backoff_base_s: float = BACKOFF_BASE_S,
        backoff_max_s: float = BACKOFF_MAX_S,
    ) -> None:
        self.clock = clock
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.runtime: PodRuntime = runtime or SimulatedPodRuntime(clock, random.Random(seed))
        self.store = ObjectStore(clock.now)
        self.ledger = ResourceLedger()
        self.nodes = NodeIndex(placement)
        self.scheduler = Scheduler(
            self.nodes, self._bind, self._unschedulable, self._call_soon
        )
        self._pods: dict[str, PodRecord] = {}  # uid -> live pod (not yet exited)
        self._pods_by_key: dict[tuple[str, str], PodRecord] = {}
        self._owners: dict[OwnerKey, OwnerPods] = {}
        self._dirty: dict[OwnerKey, None] = {}
        self._flush_scheduled = False
        self._pod_seq = itertools.count()
        self._pod_listeners: list[PodListener] = []
        self._unschedulable_listeners: list[Callable[[], None]] = []
        self._first_pod_at: dict[tuple[str, str], float] = {}  # (ns, job label) -> time
        self._first_running_at: dict[tuple[str, str], float] = {}
        self._running_cpu_milli = 0
        self._running_pods = 0
        self._cpu_total_milli = 0
        self._requested_cpu_milli = 0  # Σ CPU requests of live pods
        # owner uid -> objects naming it in ownerReferences (garbage collection)
        self._dependents: dict[str, dict[tuple[str, str, str], None]] = {}
        for kind in WORKLOAD_KINDS:
            self.store.listen(kind, functools.partial(self._workload_event, kind))
        for kind in (*WORKLOAD_KINDS, "Service"):
            self.store.listen(kind, functools.partial(self._track_owner, kind))
        self.store.listen(TRAINING_JOB, self._collect_garbage)

    # ================================================================ nodes
    def add_node(
        self,
        name: str,
        allocatable: Mapping[str, Any],
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """Add a node with ``allocatable`` resources (``{"cpu": "16", "memory": "128Gi"}``)."""
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
        node = Node(
            name, len(self.nodes.nodes), capacity.cpu_milli, capacity.memory_mega, capacity.gpu,
            dict(labels or {}),
        )
        self.nodes.add(node)
        self.ledger.set_node(name, capacity)
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
        return self.store.create("Job", job)

    async def create_replica_set(self, replica_set: Manifest) -> Manifest:
        return self.store.create("ReplicaSet", replica_set)

    async def get_replica_set(self, namespace: str, name: str) -> Manifest:
        return self._with_status("ReplicaSet", self.store.get("ReplicaSet", namespace, name))

    async def delete_replica_set(self, namespace: str, name: str) -> None:
        self.store.delete("ReplicaSet", namespace, name)

    async def create_service(self, service: Manifest) -> Manifest:
        return self.store.create("Service", service)

    async def delete_service(self, namespace: str, name: str) -> None:
        self.store.delete("Service", namespace, name)

    async def get_trainer_job(self, job: Any) -> Manifest:
        namespace, name = _job_ref(job)
        return await self.get_trainer_job_by_name(namespace, f"{name}-trainer")

    async def get_trainer_job_by_name(self, namespace: str, name: str) -> Manifest:
        return self._with_status("Job", self.store.get("Job", namespace, name))

    async def update_trainer_job(self, job: Manifest) -> Manifest:
        return self._with_status("Job", self.store.replace("Job", job))

    async def delete_trainer_job(self, namespace: str, name: str) -> None:
        self.store.delete("Job", namespace, name)

    # ---------------------------------------------------- optional: VictimScaling
    async def trainer_pods(self, job: Any, leaving: bool = False) -> list[TrainerPod]:
        namespace, name = _job_ref(job)
        owner = self._owners.get(("Job", namespace, f"{name}-trainer"))
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
        active count already at parallelism and picks no victims of its own."""
        stored = self.store.replace("Job", job)  # ConflictError before any pod is touched
        namespace = stored["metadata"]["namespace"]
        owner_key = ("Job", namespace, stored["metadata"]["name"])
        for pod_name in victims:
            pod = self._pods_by_key.get((namespace, pod_name))
            if pod is not None and pod.owner == owner_key:
                self._delete_pod(pod)
        return self._with_status("Job", stored)

    # ================================================================ Cluster port: observation
    async def job_pods(self, job: Any) -> JobPods:
        namespace, name = _job_ref(job)
        owner = self._owners.get(("Job", namespace, f"{name}-trainer"))
        if owner is None:
            return JobPods(0, 0, 0, 0, 0)
        return JobPods(
            owner.active, owner.running, owner.pending, owner.unbound, owner.terminating
        )

    async def inquiry_resource(self) -> ClusterResource:
        return self.ledger.snapshot()

    # ================================================================ Cluster port: TrainingJobs
    async def update_training_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        self.store.update_status(TRAINING_JOB, namespace, name, status)

    def watch_training_jobs(self, handler: TrainingJobHandler) -> Unsubscribe:
        """Deliver TrainingJob events to ``handler`` in order, from a task on the running loop."""
        queue: asyncio.Queue[tuple[str, Manifest]] = asyncio.Queue()
        for obj in self.store.items(TRAINING_JOB):
            queue.put_nowait(("ADDED", copy_manifest(obj)))

        def listener(event: str, obj: Manifest, old: Manifest | None) -> None:
            queue.put_nowait((event, copy_manifest(obj)))

        unlisten = self.store.listen(TRAINING_JOB, listener)
        task = asyncio.get_running_loop().create_task(self._deliver(queue, handler))

        def unsubscribe() -> None:
            unlisten()
            task.cancel()

        return unsubscribe

    @staticmethod
    async def _deliver(
        queue: asyncio.Queue[tuple[str, Manifest]], handler: TrainingJobHandler
    ) -> None:
        methods = {
            "ADDED": handler.on_add,
            "MODIFIED": handler.on_update,
            "DELETED": handler.on_del,
        }
        while True:
            event, obj = await queue.get()
            try:
                await methods[event](obj)
            except Exception:  # a handler bug must not stop the watch, as with an informer
                log.exception("TrainingJob %s handler failed for %s", event, object_key(obj))

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
        return self._with_status("Deployment", self.store.get("Deployment", namespace, name))

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
        if (namespace, name) in self._pods_by_key:
            raise AlreadyExistsError("Pod", namespace, name, "already exists")
        manifest = copy_manifest(dict(pod))
        manifest.setdefault("metadata", {})["namespace"] = namespace
        record = self._new_pod(manifest, pod_request(manifest), None)
        return copy_manifest(record.manifest)

    def delete_pod(self, namespace: str, name: str) -> None:
        pod = self._pods_by_key.get((namespace, name))
        if pod is None:
            raise NotFoundError("Pod", namespace, name)
        self._delete_pod(pod)

    def evict_pod(self, namespace: str, name: str, reason: str = "EvictionByEvictionAPI") -> None:
        """Delete a pod as the eviction API does: first mark it ``DisruptionTarget``.

        A Job whose podFailurePolicy ignores that condition does not count the
        pod's failure, whatever its exit code (chaos tests, node drains).
        """
        pod = self._pods_by_key.get((namespace, name))
        if pod is None:
            raise NotFoundError("Pod", namespace, name)
        status = pod.manifest["status"]
        condition = {"type": "DisruptionTarget", "status": "True", "reason": reason}
        status["conditions"] = [*(status.get("conditions") or ()), condition]
        self._delete_pod(pod)

    async def last_trainer_failure(self, job: Any) -> str:
        """``<pod> (exit <code>): <last line of its termination message>``, one line, of the
        last counted failure of a job's trainers; "" if none (optional `Cluster` extra that
        the Controller puts in a Failed status)."""
        namespace, name = _job_ref(job)
        owner = self._owners.get(("Job", namespace, f"{name}-trainer"))
        return owner.last_failure if owner is not None else ""

    def get_pod(self, namespace: str, name: str) -> Manifest:
        pod = self._pods_by_key.get((namespace, name))
        if pod is None:
            raise NotFoundError("Pod", namespace, name)
        return copy_manifest(pod.manifest)

    def list_pods(self, namespace: str | None = None) -> list[Manifest]:
        """Copies of every live pod (O(pods): for tests and inspection, not for sampling)."""
        return [
            copy_manifest(pod.manifest)
            for pod in self._pods.values()
            if namespace is None or pod.namespace == namespace
        ]

    def pod_records(self) -> Iterable[PodRecord]:
        """The live pods themselves (read-only), O(pods)."""
        return list(self._pods.values())

    # ================================================================ sampling
    def watch_pods(self, listener: PodListener) -> Unsubscribe:
        """Call ``listener(event, pod)`` synchronously on each pod transition."""
        self._pod_listeners.append(listener)
        return lambda: self._pod_listeners.remove(listener)

    def trainer_counts(self, namespace: str, name: str) -> TrainerCounts:
        """Trainers of one TrainingJob right now."""
        job = self.store.peek("Job", namespace, f"{name}-trainer")
        owner = self._owners.get(("Job", namespace, f"{name}-trainer"))
        desired = int((job or {}).get("spec", {}).get("parallelism", 1)) if job else 0
        key = (namespace, name)
        if owner is None:
            return TrainerCounts(desired, 0, 0, 0, self._first_pod_at.get(key), None)
        return TrainerCounts(
            desired,
            owner.running,
            owner.pending,
            owner.terminating,
            self._first_pod_at.get(key),
            self._first_running_at.get(key),
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
            running_cpu_request_milli=self._running_cpu_milli,
            requested_cpu_milli=self._requested_cpu_milli,
            running_pods=self._running_pods,
            pending_pods=len(self._pods) - self._running_pods,
            unbound_pods=len(self.scheduler.queue),
            trainers=trainers,
            deployments=deployments,
        )

    # ================================================================ workload controllers
    def _workload_event(
        self, kind: str, event: str, obj: Manifest, old: Manifest | None
    ) -> None:
        namespace, name = object_key(obj)
        key: OwnerKey = (kind, namespace, name)
        if event == "DELETED":  # cascade now, so a same-named successor starts clean
            self._reconcile(key)
            return
        if event == "ADDED":
            owner = self._owners.setdefault(key, OwnerPods())
            owner.succeeded = owner.failed = 0
            owner.condition = owner.failure_reason = None
            owner.failure_condition_message = owner.last_failure = ""
            owner.generation = -1
        self._mark_dirty(key)

    def _track_owner(self, kind: str, event: str, obj: Manifest, old: Manifest | None) -> None:
        if event == "MODIFIED":
            return
        namespace, name = object_key(obj)
        for reference in (obj.get("metadata") or {}).get("ownerReferences") or ():
            uid = reference.get("uid")
            if not uid:
                continue
            dependents = self._dependents.setdefault(uid, {})
            if event == "ADDED":
                dependents[(kind, namespace, name)] = None
            else:
                dependents.pop((kind, namespace, name), None)
                if not dependents:
                    del self._dependents[uid]

    def _collect_garbage(self, event: str, obj: Manifest, old: Manifest | None) -> None:
        """A deleted TrainingJob takes its children along, as Kubernetes' garbage collector.

        Children name the job in ``ownerReferences`` (the JobParser sets them), so
        they go even if no Controller hears of the deletion.
        """
        if event != "DELETED":
            return
        uid = (obj.get("metadata") or {}).get("uid")
        for kind, namespace, name in list(self._dependents.get(uid, {})):
            with contextlib.suppress(NotFoundError):
                self.store.delete(kind, namespace, name)

    def _mark_dirty(self, key: OwnerKey) -> None:
        self._dirty[key] = None
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._call_soon(self._flush)

    def _call_soon(self, callback: Callable[[], None]) -> None:
        loop = getattr(self.clock, "loop", None) or asyncio.get_running_loop()
        loop.call_soon(callback)

    def _flush(self) -> None:
        self._flush_scheduled = False
        while self._dirty:
            dirty, self._dirty = self._dirty, {}
            for key in dirty:
                self._reconcile(key)

    def _reconcile(self, key: OwnerKey) -> None:
        """Make an owner's active pods match its desired count (create or delete)."""
        kind, namespace, name = key
        obj = self.store.peek(kind, namespace, name)
        owner = self._owners.get(key)
        if owner is None:
            return
        if obj is None:  # owner deleted: its pods go too (cascading deletion)
            for pod in list(owner.pods.values()):
                self._delete_pod(pod)
            if not owner.pods:
                del self._owners[key]
            return
        want, owner.condition = wanted_pods(kind, obj["spec"], owner)
        diff = want - owner.active
        if diff > 0 and owner.backoff_until > self.clock.now():
            if owner.backoff_timer is None:  # come back when the back-off ends
                owner.backoff_timer = self.clock.call_at(
                    owner.backoff_until, self._backoff_over, key
                )
            return
        if diff > 0:
            self._refresh_template(obj, owner)
            for _ in range(diff):
                self._create_owned_pod(key, obj, owner)
        elif diff < 0:
            active = [pod for pod in owner.pods.values() if not pod.terminating]
            active.sort(key=PodRecord.deletion_rank)
            for pod in active[:-diff]:
                self._delete_pod(pod)

    def _backoff_over(self, key: OwnerKey) -> None:
        owner = self._owners.get(key)
        if owner is not None:
            owner.backoff_timer = None
            self._mark_dirty(key)

    def _refresh_template(self, obj: Manifest, owner: OwnerPods) -> None:
        generation = obj["metadata"]["generation"]
        if owner.generation != generation:
            template = obj["spec"].get("template") or {}
            owner.resources = pod_request({"spec": template.get("spec") or {}})
            owner.generation = generation

    def _create_owned_pod(self, key: OwnerKey, obj: Manifest, owner: OwnerPods) -> None:
        manifest = pod_from_template(key, obj, owner.created)
        owner.created += 1
        self._new_pod(manifest, owner.resources, key)

    def _with_status(self, kind: str, obj: Manifest) -> Manifest:
        """Fill ``status`` from the live counters (the controllers' status writes)."""
        namespace, name = object_key(obj)
        obj["status"] = owner_status(kind, self._owners.get((kind, namespace, name)) or OwnerPods())
        return obj

    # ================================================================ pod lifecycle
    def _new_pod(self, manifest: Manifest, resources: Any, owner: OwnerKey | None) -> PodRecord:
        metadata = manifest["metadata"]
        seq = next(self._pod_seq)
        now = self.clock.now()
        metadata["uid"] = f"pod-{seq}"
        metadata["creationTimestamp"] = now
        manifest["status"] = {"phase": PENDING}
        pod = PodRecord(manifest, resources, owner, seq, now)
        self._pods[pod.uid] = pod
        self._pods_by_key[pod.key] = pod
        if owner is not None:
            owner_pods = self._owners[owner]
            owner_pods.pods[pod.uid] = pod
            owner_pods.count(pod, +1)
        if pod.job:
            self._first_pod_at.setdefault((pod.namespace, pod.job), now)
        pinned = (manifest.get("spec") or {}).get("nodeName")
        self._requested_cpu_milli += resources.cpu_request_milli
        self.ledger.set_pod_resources(
            pod.namespace, pod.name, resources, trainer=pod.role == "trainer"
        )
        self._emit("created", pod)
        if pinned and pinned in self.nodes.by_name:
            node = self.nodes.by_name[pinned]
            self.nodes.take(
                node, resources.cpu_request_milli, resources.memory_request_mega,
                resources.gpu_request,
            )
            self._bind(pod, node)
        else:
            self.scheduler.enqueue(pod)
        return pod

    def _transition(self, pod: PodRecord, change: Callable[[], None]) -> None:
        owner = self._owners.get(pod.owner) if pod.owner else None
        if owner is not None:
            owner.count(pod, -1)
        change()
        if owner is not None:
            owner.count(pod, +1)

    def _bind(self, pod: PodRecord, node: Node) -> None:
        def change() -> None:
            pod.node = node.name

        self._transition(pod, change)
        pod.manifest["spec"]["nodeName"] = node.name
        pod.manifest["status"]["hostIP"] = node.name
        self.ledger.set_pod_resources(
            pod.namespace, pod.name, pod.resources, node=node.name, trainer=pod.role == "trainer"
        )
        self._emit("bound", pod)
        self.runtime.start(
            pod.manifest,
            lambda: self._on_running(pod),
            lambda code: self._on_exit(pod, code),
        )

    def _on_running(self, pod: PodRecord) -> None:
        if pod.uid not in self._pods or pod.phase != PENDING:
            return

        def change() -> None:
            pod.phase = RUNNING

        self._transition(pod, change)
        now = self.clock.now()
        pod.running_at = now
        pod.manifest["status"] = {**pod.manifest["status"], "phase": RUNNING, "startTime": now}
        self._running_cpu_milli += pod.resources.cpu_request_milli
        self._running_pods += 1
        if pod.role == "trainer" and pod.job:
            self._first_running_at.setdefault((pod.namespace, pod.job), now)
        self._emit("running", pod)

    def _on_exit(self, pod: PodRecord, code: int) -> None:
        if self._pods.pop(pod.uid, None) is None:
            return
        del self._pods_by_key[pod.key]
        if pod.phase == RUNNING:
            self._running_cpu_milli -= pod.resources.cpu_request_milli
            self._running_pods -= 1
        if pod.node is not None:
            res = pod.resources
            self.nodes.take(
                self.nodes.by_name[pod.node],
                -res.cpu_request_milli, -res.memory_request_mega, -res.gpu_request,
            )
        self.ledger.remove_pod(pod.namespace, pod.name)
        self._requested_cpu_milli -= pod.resources.cpu_request_milli
        self._record_exit(pod, code)
        self._forget_owned(pod, code)
        pod.phase = SUCCEEDED if code == 0 and not pod.terminating else FAILED
        pod.manifest["status"]["phase"] = pod.phase
        self._emit("exited", pod)
        if pod.node is not None:
            self.scheduler.room_freed()

    def _forget_owned(self, pod: PodRecord, code: int) -> None:
        if pod.owner is None:
            return
        owner = self._owners.get(pod.owner)
        if owner is None:
            return
        owner.count(pod, -1)
        del owner.pods[pod.uid]
        if code == 0:
            if not pod.terminating:
                owner.succeeded += 1
                owner.crash_streak = 0
        elif not pod.terminating or pod.owner[0] == "Job":
            self._count_failure(pod, owner, code)
        self._mark_dirty(pod.owner)

    def _record_exit(self, pod: PodRecord, code: int) -> None:
        """Write the exit into the pod's status, where a podFailurePolicy looks for it.

        The runtime reports one exit code per pod (its first failing container's),
        so every container is shown terminated with that code.
        """
        message = ""
        describe = getattr(self.runtime, "termination_message", None)
        if code != 0 and describe is not None:
            message = str(describe(pod.name) or "")
        terminated: dict[str, Any] = {"exitCode": code}
        if message:
            terminated["message"] = message
        containers = (pod.manifest.get("spec") or {}).get("containers") or ()
        pod.manifest["status"] = {
            **pod.manifest["status"],
            "exitCode": code,
            "containerStatuses": [
                {"name": c.get("name", ""), "state": {"terminated": dict(terminated)}}
                for c in containers
            ],
        }

    def _count_failure(self, pod: PodRecord, owner: OwnerPods, code: int) -> None:
        """A failed pod: ignored, counted (with a back-off before its replacement) or fatal."""
        assert pod.owner is not None
        kind, namespace, name = pod.owner
        obj = self.store.peek(kind, namespace, name)
        if obj is None or owner.condition is not None:
            return  # the owner is gone or the Job already ended: leftovers do not count
        action, rule = (
            pod_failure_action(obj["spec"], pod.manifest) if kind == "Job" else ("Count", None)
        )
        if action == IGNORE:
            return
        owner.failed += 1
        message = ""
        for container in pod.manifest["status"].get("containerStatuses") or ():
            message = container["state"]["terminated"].get("message", "") or message
        lines = [line.strip() for line in message.splitlines() if line.strip()]
        why = f": {lines[-1][:LAST_FAILURE_CHARS]}" if lines else ""  # the error is the last line
        owner.last_failure = f"{pod.name} (exit {code}){why}"
        if action == FAIL_JOB:
            owner.condition = FAILED
            owner.failure_reason = POD_FAILURE_POLICY
            owner.failure_condition_message = (
                f"Pod {pod.namespace}/{pod.name} failed with exit code {code} "
                f"matching FailJob rule at index {rule}"
            )
        ran = self.clock.now() - pod.running_at if pod.running_at is not None else 0.0
        owner.crash_streak = 1 if ran >= BACKOFF_RESET_S else owner.crash_streak + 1
        owner.backoff_until = self.clock.now() + crash_backoff_s(
            owner.crash_streak, self.backoff_base_s, self.backoff_max_s
        )

    def _delete_pod(self, pod: PodRecord) -> None:
        """Delete a pod: at once if unbound; else it terminates within its grace period."""
        if pod.terminating or pod.uid not in self._pods:
            return
        if pod.node is None:
            self.scheduler.dequeue(pod)

            def mark() -> None:
                pod.terminating = True

            self._transition(pod, mark)
            self._emit("deleting", pod)
            self._on_exit(pod, 0)
            return

        def change() -> None:
            pod.terminating = True

        self._transition(pod, change)
        pod.manifest["metadata"]["deletionTimestamp"] = self.clock.now()
        grace = (pod.manifest.get("spec") or {}).get(
            "terminationGracePeriodSeconds", DEFAULT_GRACE_PERIOD_S
        )
        self._emit("deleting", pod)
        self.runtime.stop(pod.manifest, float(grace))

    # ================================================================ events
    def _unschedulable(self) -> None:
        for callback in list(self._unschedulable_listeners):
            try:
                callback()
            except Exception:
                log.exception("unschedulable listener failed")

    def _emit(self, event: str, pod: PodRecord) -> None:
        for listener in self._pod_listeners:
            with contextlib.suppress(Exception):
                listener(event, pod)
