"""The `ManagedTrainers` capability of the in-process cluster: pod-level calls for a
controller that runs a trainer Job's pods itself (``spec.managedBy``).

A mixin of `InProcessCluster`: the Job controller leaves a managed Job alone
(`workloads.managed_elsewhere`), keeps its finished pods in ``OwnerPods.finished``
(a deleted pod vanishes once it exits, as in Kubernetes), and these calls are
what that other controller uses. As a real controller does, it reads trainer
pods from a **watch-fed view**, selected by labels (not by owner): every pod
change reaches the view, and the controller's callback, ``trainer_watch_lag_s``
late (0 by default; the contract tests turn it on), so a controller that trusts
its cache right after its own writes overshoots here as it would on a cluster.
Status writes pass the API server's validation of externally managed Jobs
(`jobstatus`) and are compare-and-swap on the status read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from edl.accounting import pod_request
from edl.api.names import ANNOTATION_TRAINER_VICTIMS, LABEL_JOB, ROLE_TRAINER, object_key
from edl.cluster.inproc.jobstatus import job_status_errors
from edl.cluster.inproc.pods import OwnerKey, OwnerPods, PodRecord
from edl.cluster.inproc.store import copy_manifest
from edl.cluster.inproc.workloads import managed_elsewhere
from edl.cluster.port import (
    AlreadyExistsError,
    ConflictError,
    InvalidError,
    Manifest,
    NotFoundError,
    Unsubscribe,
)

if TYPE_CHECKING:
    from edl.cluster.inproc.kubelet import PodLifecycle
    from edl.cluster.inproc.store import ObjectStore
    from edl.cluster.port import Clock

COUNTED = "edl.dev/counted"
TRACKING_FINALIZERS = ("edl.dev/job-tracking", "batch.kubernetes.io/job-tracking")
ViewKey = tuple[str, str]  # (namespace, TrainingJob)


class ManagedTrainerPods:
    """Trainer pods for a controller outside the in-process Job controller."""

    clock: Clock
    store: ObjectStore
    pods: PodLifecycle
    _owners: dict[OwnerKey, OwnerPods]
    trainer_watch_lag_s: float = 0.0
    trainer_events: list[tuple[str, str, str, str]]

    def _trainer_view(self) -> dict[ViewKey, dict[str, Manifest]]:
        """uid -> slim pod, per TrainingJob, as the pod watch has delivered them."""
        view: dict[ViewKey, dict[str, Manifest]] | None = getattr(self, "_view", None)
        if view is None:
            view = {}
            self._view = view
            self._view_listeners: list[Callable[[str, str], None]] = []
            self.trainer_events = []
            self.pods.listeners.append(self._pod_changed)
        return view

    def trainer_clock(self) -> float:
        return self.clock.now()

    def trainer_pod_manifests(self, namespace: str, job: str) -> list[Manifest]:
        pods = self._trainer_view().get((namespace, job), {})
        return [copy_manifest(pod) for pod in pods.values()]

    def trainer_pod_jobs(self) -> list[tuple[str, str]]:
        return list(self._trainer_view())

    async def create_trainer_pod(self, pod: Manifest) -> None:
        namespace, name = object_key(pod)
        if (namespace, name) in self.pods.by_key or self._finished_pod(namespace, name):
            raise AlreadyExistsError("Pod", namespace, name, "already exists")
        (reference,) = pod["metadata"]["ownerReferences"]
        key: OwnerKey = ("Job", namespace, reference["name"])
        if self.store.peek("Job", namespace, reference["name"]) is None:
            raise NotFoundError("Job", namespace, reference["name"])
        self._owners.setdefault(key, OwnerPods())
        manifest = copy_manifest(pod)
        manifest["metadata"]["namespace"] = namespace
        self._trainer_view()
        self.pods.create(manifest, pod_request(manifest), key)

    async def delete_trainer_pod(self, namespace: str, name: str) -> None:
        pod = self.pods.by_key.get((namespace, name))
        if pod is not None:
            self.pods.delete(pod)
            return
        found = self._finished_pod(namespace, name)
        if found is None:
            raise NotFoundError("Pod", namespace, name)
        owner, finished = found
        del owner.finished[name]
        self._publish(finished, gone=True)

    async def mark_trainer_pod_counted(self, namespace: str, name: str) -> None:
        pod = self.pods.by_key.get((namespace, name))
        found = self._finished_pod(namespace, name)
        if pod is None and found is not None:
            pod = found[1]
        if pod is None:
            raise NotFoundError("Pod", namespace, name)
        annotations = pod.manifest["metadata"].setdefault("annotations", {})
        annotations[COUNTED] = "true"
        finalizers = pod.manifest["metadata"].get("finalizers") or []
        pod.manifest["metadata"]["finalizers"] = [f for f in finalizers
                                                  if f not in TRACKING_FINALIZERS]
        self._publish(pod)

    def name_victims(self, job: Manifest, victims: list[str]) -> Manifest:
        """Store the Job with the Autoscaler's victims in its annotation
        (`ANNOTATION_TRAINER_VICTIMS`): edl's trainer controller deletes them, so its
        view of the pods never disagrees with the new parallelism."""
        job = copy_manifest(job)
        annotations = job["metadata"].setdefault("annotations", {})
        annotations[ANNOTATION_TRAINER_VICTIMS] = ",".join(victims)
        return self.store.replace("Job", job)

    async def post_trainer_event(self, namespace: str, job: str, reason: str,
                                 message: str) -> None:
        self._trainer_view()
        self.trainer_events.append((namespace, job, reason, message))

    async def update_trainer_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any],
        expected: Mapping[str, Any] | None = None,
    ) -> None:
        current = self.store.peek("Job", namespace, name)
        if current is None:
            raise NotFoundError("Job", namespace, name)
        if expected is not None and (current.get("status") or {}) != dict(expected):
            raise ConflictError("Job", namespace, name, "its status changed since it was read")
        merged = {**(current.get("status") or {}), **status}
        merged = {k: v for k, v in merged.items() if v is not None}  # a merge patch's null
        spec = current.get("spec") or {}
        if managed_elsewhere(spec):
            errors = job_status_errors(spec, current.get("status") or {}, merged)
            if errors:
                raise InvalidError("Job", namespace, name, "; ".join(errors), status=422)
        self.store.update_status("Job", namespace, name, merged)

    def watch_trainers(self, callback: Callable[[str, str], None]) -> Unsubscribe:
        """Trainer pod changes (``trainer_watch_lag_s`` late) and trainer Job spec
        changes, by TrainingJob."""
        self._trainer_view()

        def on_job(event: str, obj: Manifest, old: Manifest | None) -> None:
            job = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB)
            changed = old is None or old.get("spec") != obj.get("spec")
            if job and changed and event != "DELETED":
                self._later(callback, object_key(obj)[0], job)

        self._view_listeners.append(callback)
        unlisten = self.store.listen("Job", on_job)

        def unsubscribe() -> None:
            if callback in self._view_listeners:
                self._view_listeners.remove(callback)
            unlisten()

        return unsubscribe

    # -- the watch-fed view -------------------------------------------------------------
    def _pod_changed(self, event: str, pod: PodRecord) -> None:
        if pod.role != ROLE_TRAINER or not pod.job:
            return
        gone = event == "removed" or (
            event == "exited" and self._finished_pod(pod.namespace, pod.name) is None)
        self._publish(pod, gone=gone)

    def _publish(self, pod: PodRecord, gone: bool = False) -> None:
        """Deliver this pod's current state (or its removal) to the view, lagged."""
        if pod.role != ROLE_TRAINER or not pod.job:
            return
        snapshot = None if gone else _slim(pod)
        self._later(self._apply, (pod.namespace, pod.job), pod.uid, snapshot)

    def _apply(self, key: ViewKey, uid: str, snapshot: Manifest | None) -> None:
        pods = self._trainer_view().setdefault(key, {})
        if snapshot is None:
            pods.pop(uid, None)
        else:
            pods[uid] = snapshot
        if not pods:
            self._view.pop(key, None)
        for callback in list(self._view_listeners):
            callback(*key)

    def _later(self, callback: Callable[..., object], *args: Any) -> None:
        if self.trainer_watch_lag_s > 0:
            self.clock.call_later(self.trainer_watch_lag_s, callback, *args)
        else:
            callback(*args)

    def _finished_pod(self, namespace: str, name: str) -> tuple[OwnerPods, PodRecord] | None:
        for (kind, owner_namespace, _), owner in self._owners.items():
            if kind == "Job" and owner_namespace == namespace and name in owner.finished:
                return owner, owner.finished[name]
        return None


def _slim(pod: PodRecord) -> Manifest:
    """What the trainer controller reads of a pod (a copy; never the containers). The
    model has no readiness probes: a running, undeleted pod is Ready."""
    metadata = pod.manifest["metadata"]
    status = pod.manifest.get("status") or {}
    conditions = [dict(c) for c in status.get("conditions") or ()]
    if pod.phase == "Running" and not pod.terminating:
        conditions.append({"type": "Ready", "status": "True"})
    return {
        "metadata": {
            "name": pod.name, "namespace": pod.namespace, "uid": pod.uid,
            "creationTimestamp": metadata.get("creationTimestamp"),
            "deletionTimestamp": metadata.get("deletionTimestamp"),
            "annotations": dict(metadata.get("annotations") or {}),
            "ownerReferences": [dict(r) for r in metadata.get("ownerReferences") or ()],
            "finalizers": list(metadata.get("finalizers") or ()),
        },
        "spec": {"nodeName": pod.node},
        "status": {
            "phase": pod.phase,
            "reason": status.get("reason"),
            "startTime": status.get("startTime"),
            "conditions": conditions,
            "containerStatuses": copy_manifest(
                {"c": status.get("containerStatuses") or []})["c"],
        },
    }
