"""`KubeCluster`: the `Cluster` port on a Kubernetes API server (lightkube).

The same Controller and Autoscaler that run in simulation drive this class.
What it does that the in-process cluster does not need to:

* children are written with **server-side apply** under the field manager `edl-controller` and
  carry an **ownerReference** to their TrainingJob, so deleting the TrainingJob garbage-collects
  them even if the controller is down. Applying is idempotent, so `create_*` on an existing
  child updates the object (a ReplicaSet's running pods keep their old template: only later pods
  get the new one; docs/kubernetes.md). A batch/v1 Job's pod template is immutable, so an
  existing trainer Job only gets its labels and its parallelism clamped into [min, max];
* nodes, pods and ResourceQuotas come from list+watch caches (`reflector`, `state`), so
  `inquiry_resource` and `job_pods` never list pods; LimitRanges and PriorityClasses are
  watched to know when a trainer pod's dry-run answer is stale (`dry_run`);
* every call is retried on 5xx/429 and dropped connections; a stale `update_trainer_job` raises
  `ConflictError` (409) for the caller to re-read;
* TrainingJob events come from kopf (`edl.kube.operator`), which calls
  `dispatch_add/update/del`; status writes get Kubernetes bookkeeping (`edl.kube.status`) and
  failures become Warning Events.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from lightkube import AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import ReplicaSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Node, Pod, ResourceQuota, Service
from lightkube.types import CascadeType, PatchType

from edl.api.installation import managed_by
from edl.api.names import (
    LABEL_JOB,
    LABEL_ROLE,
    ROLE_TRAINER,
    JobKey,
    job_key,
    trainer_job_name,
)
from edl.cluster.port import (
    ClusterError,
    ConflictError,
    JobPods,
    Manifest,
    NotFoundError,
    NotLeaderError,
    TrainerPod,
    TrainingJobHandler,
    Unsubscribe,
)
from edl.control.trainers import CRASH_BACKOFF_S
from edl.kube.client import FIELD_MANAGER
from edl.kube.crd import GROUP, KIND, PLURAL, VERSION
from edl.kube.dry_run import KubeAdmission
from edl.kube.events import EventRecorder, make_event
from edl.kube.failures import last_trainer_failure
from edl.kube.kueue import KubeKueue, ServersWorkloadStore, TrainerJobStore, kueue_reflectors
from edl.kube.managed import KubeManagedTrainers, scale_metadata, with_victims
from edl.kube.reflector import Reflector
from edl.kube.retry import http_status, is_conflict, is_not_found, retry_call
from edl.kube.state import ClusterState, NodeStore, PodStore, QuotaStore
from edl.kube.status import failure_reason, health_changes, kube_status, status_patch
from edl.kube.training_jobs import KubeTrainingJobs

if TYPE_CHECKING:
    from edl.accounting import ClusterResource
    from edl.api.trainingjob import TrainingJob

log = logging.getLogger(__name__)

TrainingJobResource = create_namespaced_resource(GROUP, VERSION, KIND, PLURAL)
# a label no TrainingJob carries: the health probe's watch selects nothing
PROBE_LABEL = "edl.dev/watch-probe"


class NullStore:
    """A `reflector.Store` that keeps nothing (the TrainingJob health probe's)."""

    def begin_replace(self) -> None:
        pass

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        pass

    def end_replace(self) -> None:
        pass
TrainingJobStatus = TrainingJobResource.Status

KINDS: dict[str, type] = {"Job": Job, "ReplicaSet": ReplicaSet, "Service": Service}


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj.get("metadata") or {})


def _key(obj: Mapping[str, Any]) -> JobKey:
    meta = _meta(obj)
    return meta.get("namespace") or "default", meta.get("name") or ""


def _to_dict(obj: Any) -> dict[str, Any]:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


class KubeCluster(KubeTrainingJobs, KubeManagedTrainers, KubeKueue, KubeAdmission):
    """`edl.cluster.port.Cluster` over lightkube; start() before use, stop() after."""

    def __init__(self, client: AsyncClient, *, namespace: str | None = None,
                 events: EventRecorder | None = None, fence: Callable[[], bool] | None = None,
                 watch_client: AsyncClient | None = None, delete_victims: bool = True,
                 crash_backoff_s: tuple[float, float] = CRASH_BACKOFF_S,
                 kueue: bool = False) -> None:
        self.client = client
        self.crash_backoff_s = crash_backoff_s  # `CrashBackoff`: a crash replacement's delay
        # every write first asks fence() (the leader still holds its Lease), each attempt
        self.fence = fence
        # Watch streams get their own connection pool: cancelling a stream must never
        # leave the pool that serves ordinary requests (status, scaling, leases) stuck.
        watch_client = watch_client or client
        self.namespace = namespace  # TrainingJobs of this namespace only; None: every namespace
        self.state = ClusterState()
        self.events = events or EventRecorder(client)
        # Pods of every namespace: they all take node room, even when only one
        # namespace's TrainingJobs are managed (`namespace` limits kopf, not accounting).
        self.pod_reflector = Reflector(watch_client, Pod, PodStore(self.state), namespace="*")
        self.node_reflector = Reflector(watch_client, Node, NodeStore(self.state), namespace=None)
        self.quota_reflector = Reflector(watch_client, ResourceQuota, QuotaStore(self.state))
        # --kueue: trainer Jobs followed, so Kueue's suspend/unsuspend act at once (edl.kube.kueue)
        self.kueue = kueue
        # and servers' Workloads, so Kueue's admission of master and pservers acts at once
        self.servers_store = ServersWorkloadStore() if kueue else None
        self.kueue_reflectors = kueue_reflectors(
            watch_client, namespace or "*", TrainerJobStore(self._trainer_job_seen),
            self.servers_store) if self.servers_store is not None else []
        # kopf's TrainingJob stream exports nothing of its health: this watch of the same
        # API (selecting no object, so it costs no events) stands for it in watch_health
        self.training_job_probe = Reflector(
            watch_client, TrainingJobResource, NullStore(), namespace=namespace or "*",
            labels={PROBE_LABEL: "true"})
        # what admission makes of trainer pods: LimitRanges and PriorityClasses watched
        self.admission_reflectors = self._watch_admission(watch_client)
        self._tasks: list[asyncio.Task[None]] = []
        self._handlers: list[TrainingJobHandler] = []
        self._jobs: dict[JobKey, dict[str, Any]] = {}  # latest TrainingJob bodies seen
        self._dispatch_lock = asyncio.Lock()
        self.last_resources: ClusterResource | None = None
        # told the reason of each Warning Event posted on a TrainingJob (edl_job_warnings)
        self.on_warning: Callable[[str], None] | None = None
        # Delete the trainer pods the policy names on a shrink (needs `delete` on pods);
        # False when not asked to, or after a 403: the Job controller then picks.
        self._victims_allowed = delete_victims

    def reflectors(self) -> list[Reflector]:
        """Every list+watch this cluster runs (trainer Jobs and Workloads only with --kueue)."""
        return [self.node_reflector, self.pod_reflector, self.quota_reflector,
                self.training_job_probe, *self.admission_reflectors, *self.kueue_reflectors]

    def watch_health(self) -> dict[str, tuple[int, float]]:
        """Per watched kind: (stream restarts so far, seconds failing to follow the server)."""
        return {r.kind: (r.watch_restarts, r.stale_for()) for r in self.reflectors()}

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self, timeout: float = 60.0) -> None:
        """Start the node, pod and quota caches; wait for nodes and pods (quotas follow)."""
        for reflector in self.reflectors():
            self._tasks.append(asyncio.create_task(reflector.run(), name=f"watch-{reflector.kind}"))
        # not wait_for: on Python 3.11 it swallows a cancel (a SIGTERM) that arrives as
        # the caches sync, and the stopping leader would run on until SIGKILLed
        async with asyncio.timeout(timeout):
            await asyncio.gather(self.node_reflector.synced.wait(),
                                 self.pod_reflector.synced.wait())

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    # -- helpers -----------------------------------------------------------------------

    def _error(self, exc: Exception, kind: str, namespace: str, name: str) -> Exception:
        """Translate an API failure into the port's errors."""
        if is_not_found(exc):
            return NotFoundError(kind, namespace, name)
        if is_conflict(exc):
            return ConflictError(kind, namespace, name, "resourceVersion is stale")
        status = http_status(exc)
        return ClusterError(kind, namespace, name, f"HTTP {status}: {exc}", status)

    async def _call(self, what: str, call: Callable[[], Any], kind: str, namespace: str,
                    name: str, *, write: bool = True) -> Any:
        fence = self.fence if write else None

        def fenced() -> Any:
            if fence is not None and not fence():
                raise NotLeaderError(kind, namespace, name, f"{what}: not the leader")
            return call()

        try:
            return await retry_call(fenced, what=what, retry_conflicts=False)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if http_status(exc) is None and not is_not_found(exc):
                raise
            raise self._error(exc, kind, namespace, name) from exc

    async def _training_job_uid(self, namespace: str, name: str) -> str | None:
        body = self._jobs.get((namespace, name))
        uid = _meta(body).get("uid") if body else None
        if uid:
            return str(uid)
        try:
            obj = await self.client.get(TrainingJobResource, name, namespace=namespace)
        except Exception as exc:
            if is_not_found(exc):
                return None
            raise
        return _meta(_to_dict(obj)).get("uid")

    async def _owned(self, manifest: Manifest) -> Manifest:
        """The manifest with an ownerReference to its TrainingJob (label edl.dev/job)."""
        manifest = copy.deepcopy(manifest)
        meta = manifest.setdefault("metadata", {})
        namespace = meta.get("namespace") or "default"
        job = (meta.get("labels") or {}).get(LABEL_JOB)
        if not job:
            return manifest
        uid = await self._training_job_uid(namespace, job)
        if uid:
            meta["ownerReferences"] = [{
                "apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": job, "uid": uid,
                "controller": True, "blockOwnerDeletion": True,
            }]
        return manifest

    async def _apply(self, manifest: Manifest) -> Manifest:
        kind = manifest["kind"]
        resource = KINDS[kind]
        namespace, name = _key(manifest)
        owned = await self._owned(manifest)
        stored = await self._call(
            f"apply {kind} {namespace}/{name}",
            lambda: self.client.patch(resource, name, owned, namespace=namespace,
                                      patch_type=PatchType.APPLY, field_manager=FIELD_MANAGER,
                                      force=True),
            kind, namespace, name)
        return _to_dict(stored)

    async def _get(self, resource: type, kind: str, namespace: str, name: str) -> Manifest:
        obj = await self._call(f"get {kind} {namespace}/{name}",
                               lambda: self.client.get(resource, name, namespace=namespace),
                               kind, namespace, name, write=False)
        return _to_dict(obj)

    async def _delete(self, resource: type, kind: str, namespace: str, name: str) -> None:
        await self._call(f"delete {kind} {namespace}/{name}",
                         lambda: self.client.delete(resource, name, namespace=namespace,
                                                    cascade=CascadeType.BACKGROUND),
                         kind, namespace, name)

    # -- children ----------------------------------------------------------------------

    async def create_job(self, job: Manifest) -> Manifest:
        namespace, name = _key(job)
        try:
            current = await self._get(Job, "Job", namespace, name)
        except NotFoundError:
            return await self._apply(job)
        return await self._follow_trainer_job(job, current)

    async def _follow_trainer_job(self, wanted: Manifest, current: Manifest) -> Manifest:
        """An existing trainer Job: keep its template (immutable), clamp parallelism."""
        namespace, name = _key(current)
        low, high = self._trainer_range(_meta(wanted).get("labels", {}).get(LABEL_JOB),
                                        namespace)
        parallelism = int((current.get("spec") or {}).get("parallelism") or 0)
        clamped = min(max(parallelism, low), high) if high >= low > 0 else parallelism
        owned = await self._owned(wanted)
        patch: dict[str, Any] = {"metadata": {
            "labels": _meta(owned).get("labels") or {},
            "ownerReferences": _meta(owned).get("ownerReferences"),
        }}
        if clamped != parallelism:
            patch["spec"] = {"parallelism": clamped}
        return await self._merge_patch_job(namespace, name, patch, "patch")

    def _trainer_range(self, job: str | None, namespace: str) -> tuple[int, int]:
        body = self._jobs.get((namespace, job or ""))
        trainer = ((body or {}).get("spec") or {}).get("trainer") or {}
        low = int(trainer.get("min-instance") or 0)
        high = int(trainer.get("max-instance") or low)
        return low, high

    async def create_replica_set(self, replica_set: Manifest) -> Manifest:
        return await self._apply(replica_set)

    async def create_service(self, service: Manifest) -> Manifest:
        return await self._apply(service)

    async def get_replica_set(self, namespace: str, name: str) -> Manifest:
        return await self._get(ReplicaSet, "ReplicaSet", namespace, name)

    async def delete_replica_set(self, namespace: str, name: str) -> None:
        await self._delete(ReplicaSet, "ReplicaSet", namespace, name)

    async def scale_replica_set(self, namespace: str, name: str, replicas: int) -> None:
        patch = {"spec": {"replicas": replicas}}
        await self._call(f"scale ReplicaSet {namespace}/{name} to {replicas}",
                         lambda: self.client.patch(ReplicaSet, name, patch, namespace=namespace,
                                                   patch_type=PatchType.MERGE),
                         "ReplicaSet", namespace, name)

    async def delete_service(self, namespace: str, name: str) -> None:
        await self._delete(Service, "Service", namespace, name)

    async def get_trainer_job(self, job: TrainingJob) -> Manifest:
        namespace, name = job_key(job)
        return await self.get_trainer_job_by_name(namespace, trainer_job_name(name))

    async def get_trainer_job_by_name(self, namespace: str, name: str) -> Manifest:
        return await self._get(Job, "Job", namespace, name)

    async def update_trainer_job(self, job: Manifest) -> Manifest:
        """Patch spec.parallelism (and the Autoscaler's placement hint, when the manifest
        has one), guarded by the caller's resourceVersion (409: ConflictError)."""
        namespace, name = _key(job)
        patch: dict[str, Any] = {"spec": {"parallelism": int(job["spec"]["parallelism"])},
                                 "metadata": scale_metadata(_meta(job))}
        async with self.trainer_job_lock(namespace, name):  # vs. this process's status writes
            stored = await self._merge_patch_job(namespace, name, patch, "scale")
        self._trainer_job_changed(stored)  # the trainer controller reconciles at once
        return stored

    async def delete_trainer_job(self, namespace: str, name: str) -> None:
        await self._delete(Job, "Job", namespace, name)

    async def _merge_patch_job(
        self, namespace: str, name: str, patch: dict[str, Any], verb: str
    ) -> Manifest:
        """A JSON merge patch of a Job (a resourceVersion in the patch makes it conditional)."""
        stored = await self._call(
            f"{verb} Job {namespace}/{name}",
            lambda: self.client.patch(Job, name, patch, namespace=namespace,
                                      patch_type=PatchType.MERGE),
            "Job", namespace, name)
        return _to_dict(stored)

    # -- optional: VictimScaling (the Autoscaler names which trainers leave) -------------

    async def trainer_pods(self, job: TrainingJob, leaving: bool = False) -> list[TrainerPod]:
        return self.state.trainer_pods(*job_key(job), leaving)

    async def scale_trainer_job(self, job: Manifest, victims: list[str]) -> Manifest:
        """Name the victims to edl's trainer controller (``spec.managedBy``) in the same
        conditional patch as the lower parallelism (`with_victims`): it deletes them.
        A Job the built-in controller runs: delete them, then patch (its policy makes
        ``podReplacementPolicy: Failed``: a terminating pod is not replaced); a 403 on
        pod deletion makes this a plain `update_trainer_job` from then on."""
        namespace, _ = _key(job)
        if (job.get("spec") or {}).get("managedBy") == managed_by():
            return await self.update_trainer_job(with_victims(job, victims))
        if self._victims_allowed:
            for pod in victims:
                try:
                    await self._call(
                        f"delete trainer Pod {namespace}/{pod}",
                        functools.partial(self.client.delete, Pod, pod, namespace=namespace),
                        "Pod", namespace, pod)
                except NotFoundError:
                    continue  # already gone: its room is free either way
                except ClusterError as error:
                    if error.__cause__ is None or http_status(error.__cause__) != 403:
                        raise
                    log.warning("cannot delete trainer pods (%s): the Job controller "
                                "will choose which trainers leave", error)
                    self._victims_allowed = False
                    break
        return await self.update_trainer_job(job)

    # -- observation -------------------------------------------------------------------

    async def job_pods(self, job: TrainingJob) -> JobPods:
        return self.state.job_pods(*job_key(job))

    async def role_pods(self, job: TrainingJob, role: str) -> int:
        """Live pods of the job's master or pservers (from the pod cache: no API call)."""
        return self.state.role_pods(*job_key(job), role)

    async def last_trainer_failure(self, job: TrainingJob) -> str:
        """The trainer that failed last and its error (one pod list, asked once per failure)."""
        namespace, name = job_key(job)
        labels: dict[str, Any] = {LABEL_JOB: name, LABEL_ROLE: ROLE_TRAINER}

        async def pods() -> list[dict[str, Any]]:
            listed = self.client.list(Pod, namespace=namespace, labels=labels)
            return [_to_dict(pod) async for pod in listed]

        found = await self._call(f"list trainer pods of {namespace}/{name}", pods,
                                 "Pod", namespace, trainer_job_name(name), write=False)
        return last_trainer_failure(found)

    async def inquiry_resource(self) -> ClusterResource:
        self.last_resources = self.state.resources()
        return self.last_resources

    def watch_unschedulable(self, callback: Callable[[], None]) -> Unsubscribe:
        return self.state.watch_unschedulable(callback)

    # -- TrainingJobs (their events: edl.kube.training_jobs) ---------------------------

    async def update_training_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        body = self._jobs.get((namespace, name)) or {}
        previous = body.get("status")
        previous = previous if isinstance(previous, Mapping) else {}  # stored by anyone
        generation = _meta(body).get("generation")
        generation = generation if isinstance(generation, int) else None
        full = kube_status(status, previous, generation)
        full["selector"] = f"edl.dev/job={name},edl.dev/role=trainer"  # scale subresource
        await self._call(
            f"status of TrainingJob {namespace}/{name}",
            lambda: self.client.patch(TrainingJobStatus, name, status_patch(full),
                                      namespace=namespace, patch_type=PatchType.MERGE),
            KIND, namespace, name)
        if body:
            body["status"] = full
        for reason, text, warning in health_changes(previous, full):
            await self.events.post(make_event(
                namespace, name, _meta(body).get("uid"), reason=reason, message=text,
                type_="Warning" if warning else "Normal"))
        if full["state"] == "Failed" and previous.get("state") != "Failed":
            uid = _meta(body).get("uid")
            await self.events.post(make_event(
                namespace, name, uid, reason=failure_reason(full["message"]),
                message=full["message"], type_="Warning"))
