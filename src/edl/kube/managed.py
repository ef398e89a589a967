"""`ManagedTrainers` on Kubernetes: the pod-level calls of edl's trainer controller.

A mixin of `KubeCluster`. The trainer Job carries ``spec.managedBy:
edl.dev/trainer-controller`` (JobManagedBy: beta and on by default since
Kubernetes 1.32), so kube-controller-manager's Job controller neither creates its
pods nor writes its status; these calls do, for `edl.control.trainer_controller`.
Pod times come from the pod watch (`trainer_index`), in epoch seconds, so the
clock here is the wall clock. On an older cluster the API server drops the field,
the stored Job has no ``managedBy`` and the built-in controller runs it as before.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from edl.api.names import (
    ANNOTATION_BATCH_SIZE,
    ANNOTATION_TRAINER_PLACEMENT,
    ANNOTATION_TRAINER_VICTIMS,
)
from edl.cluster.port import (
    AlreadyExistsError,
    ClusterError,
    ConflictError,
    Manifest,
    Unsubscribe,
)
from edl.control.trainer_pods import ANNOTATION_COUNTED, TRACKING_FINALIZERS
from edl.kube.events import make_event
from edl.kube.retry import http_status
from edl.kube.trainer_index import rfc3339

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from edl.kube.events import EventRecorder
    from edl.kube.state import ClusterState

TIME_FIELDS = ("startTime", "completionTime")
CONDITION_TIMES = ("lastProbeTime", "lastTransitionTime")


def scale_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata a scale patch of a trainer Job carries: the caller's resourceVersion
    (the patch is then conditional) and the Autoscaler's placement hint and chosen batch,
    if present (the batch is the record the Autoscaler reads back as the job's batch)."""
    out: dict[str, Any] = {}
    if metadata.get("resourceVersion"):
        out["resourceVersion"] = metadata["resourceVersion"]
    annotations = metadata.get("annotations") or {}
    kept = {key: annotations[key] for key in (ANNOTATION_TRAINER_PLACEMENT,
                                              ANNOTATION_TRAINER_VICTIMS,
                                              ANNOTATION_BATCH_SIZE) if key in annotations}
    if kept:
        out["annotations"] = kept
    return out


def with_victims(job: Manifest, victims: list[str]) -> Manifest:
    """The trainer Job with the Autoscaler's victims named for edl's trainer controller,
    which deletes them: one conditional patch carries them and the new parallelism, so
    that controller never sees one without the other (no pod deleted ahead of it)."""
    job = copy.deepcopy(dict(job))
    annotations = job["metadata"].setdefault("annotations", {})
    annotations[ANNOTATION_TRAINER_VICTIMS] = ",".join(victims)
    return job


def wire_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """A status as the trainer controller computes it (times in epoch seconds) in the
    API's form (RFC 3339 times, conditions' included)."""
    body = dict(status)
    for field in TIME_FIELDS:
        if isinstance(body.get(field), int | float):
            body[field] = rfc3339(float(body[field]))
    conditions = []
    for condition in body.get("conditions") or ():
        condition = dict(condition)
        for field in CONDITION_TIMES:
            if isinstance(condition.get(field), int | float):
                condition[field] = rfc3339(float(condition[field]))
        conditions.append(condition)
    if "conditions" in body:
        body["conditions"] = conditions
    return body


class KubeManagedTrainers:
    """Trainer pods and the managed trainer Job's status, through the API server."""

    client: AsyncClient
    state: ClusterState
    events: EventRecorder

    def training_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise NotImplementedError

    async def _call(self, what: str, call: Callable[[], Any], kind: str, namespace: str,
                    name: str, *, write: bool = True) -> Any:
        raise NotImplementedError

    def trainer_clock(self) -> float:
        return time.time()

    def trainer_pod_manifests(self, namespace: str, job: str) -> list[Manifest]:
        return self.state.trainer_index.pods(namespace, job)

    def trainer_pod_jobs(self) -> list[tuple[str, str]]:
        return self.state.trainer_index.jobs()

    async def create_trainer_pod(self, pod: Manifest) -> None:
        meta = pod["metadata"]
        namespace, name = meta.get("namespace") or "default", meta["name"]
        try:
            # lightkube's create() overloads do not match its own generated resources
            await self._call(f"create trainer Pod {namespace}/{name}",
                             lambda: self.client.create(  # type: ignore[call-overload]
                                 Pod.from_dict(pod), namespace=namespace),
                             "Pod", namespace, name)
        except ClusterError as error:
            if error.__cause__ is not None and http_status(error.__cause__) == 409:
                raise AlreadyExistsError("Pod", namespace, name, "already exists") from error
            raise

    async def delete_trainer_pod(self, namespace: str, name: str) -> None:
        await self._call(f"delete trainer Pod {namespace}/{name}",
                         lambda: self.client.delete(Pod, name, namespace=namespace),
                         "Pod", namespace, name)

    async def update_trainer_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any],
        expected: Mapping[str, Any] | None = None,
    ) -> None:
        """Write the status if the stored one is still ``expected`` (compare and swap):
        re-read under this process's lock for the Job (its own scale patches wait), and
        send the patch with that read's resourceVersion, so only a writer outside this
        process can still make it a 409 in the milliseconds between."""
        async with self.trainer_job_lock(namespace, name):
            stored = await self._call(
                f"get trainer Job {namespace}/{name}",
                lambda: self.client.get(Job, name, namespace=namespace), "Job", namespace,
                name, write=False)
            current = stored.to_dict() if hasattr(stored, "to_dict") else dict(stored)
            if expected is not None and (current.get("status") or {}) != dict(expected):
                raise ConflictError("Job", namespace, name,
                                    "its status changed since it was read")
            patch: dict[str, Any] = {"status": wire_status(status)}
            version = (current.get("metadata") or {}).get("resourceVersion")
            if version:
                patch["metadata"] = {"resourceVersion": version}
            await self._call(
                f"status of trainer Job {namespace}/{name}",
                lambda: self.client.patch(Job.Status, name, patch, namespace=namespace,
                                          patch_type=PatchType.MERGE),
                "Job", namespace, name)

    def trainer_job_lock(self, namespace: str, name: str) -> asyncio.Lock:
        """One writer of a trainer Job at a time in this process (a scale patch, a status
        write): the status write's read-then-patch cannot lose to our own scale patch."""
        locks: dict[tuple[str, str], asyncio.Lock] | None = getattr(self, "_job_locks", None)
        if locks is None:
            locks = {}
            self._job_locks = locks
        return locks.setdefault((namespace, name), asyncio.Lock())

    async def mark_trainer_pod_counted(self, namespace: str, name: str) -> None:
        """One strategic merge patch: the counted mark in, the tracking finalizers out
        (other finalizers stay: upstream's ``$deleteFromPrimitiveList``)."""
        patch = {"metadata": {"annotations": {ANNOTATION_COUNTED: "true"},
                              "$deleteFromPrimitiveList/finalizers": list(TRACKING_FINALIZERS)}}
        await self._call(f"mark trainer Pod {namespace}/{name} counted",
                         lambda: self.client.patch(Pod, name, patch, namespace=namespace,
                                                   patch_type=PatchType.STRATEGIC),
                         "Pod", namespace, name)

    async def post_trainer_event(self, namespace: str, job: str, reason: str,
                                 message: str) -> None:
        body = self.training_job(namespace, job) or {}
        uid = (body.get("metadata") or {}).get("uid")
        await self.events.post(make_event(namespace, job, uid, reason=reason,
                                          message=message, type_="Warning"))
        counted = getattr(self, "on_warning", None)  # the metrics' counter (runner)
        if counted is not None:
            counted(reason)

    def watch_trainers(self, callback: Callable[[str, str], None]) -> Unsubscribe:
        unsubscribe = self.state.trainer_index.listen(callback)
        self._trainer_listeners().append(callback)

        def both() -> None:
            unsubscribe()
            listeners = self._trainer_listeners()
            if callback in listeners:
                listeners.remove(callback)

        return both

    def _trainer_listeners(self) -> list[Callable[[str, str], None]]:
        """Told after this process changed a trainer Job's parallelism, and by the Job
        watch (`--kueue`) when anyone changed a trainer Job's spec."""
        listeners: list[Callable[[str, str], None]] | None = getattr(
            self, "_scale_listeners", None)
        if listeners is None:
            listeners = []
            self._scale_listeners = listeners
        return listeners

    def _trainer_job_seen(self, namespace: str, owner: str) -> None:
        """The Job watch (``--kueue``) saw a trainer Job's spec change: reconcile it."""
        for callback in list(self._trainer_listeners()):
            callback(namespace, owner)

    def _trainer_job_changed(self, job: Manifest) -> None:
        meta = job.get("metadata") or {}
        owner = (meta.get("labels") or {}).get("edl.dev/job")
        if owner:
            for callback in list(self._trainer_listeners()):
                callback(meta.get("namespace") or "default", owner)
