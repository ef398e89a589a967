"""The `ManagedTrainers` capability of the in-process cluster: pod-level calls for a
controller that runs a trainer Job's pods itself (``spec.managedBy``).

A mixin of `InProcessCluster`: the Job controller leaves a managed Job alone
(`workloads.managed_elsewhere`), keeps its finished pods in ``OwnerPods.finished``
until they are removed here, and these calls are what that other controller uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from edl.accounting import pod_request
from edl.api.names import LABEL_JOB, ROLE_TRAINER, object_key
from edl.cluster.inproc.pods import OwnerKey, OwnerPods, PodRecord
from edl.cluster.inproc.store import copy_manifest
from edl.cluster.port import AlreadyExistsError, Manifest, NotFoundError, Unsubscribe

if TYPE_CHECKING:
    from edl.cluster.inproc.kubelet import PodLifecycle
    from edl.cluster.inproc.store import ObjectStore
    from edl.cluster.port import Clock


class ManagedTrainerPods:
    """Trainer pods for a controller outside the in-process Job controller."""

    clock: Clock
    store: ObjectStore
    pods: PodLifecycle
    _owners: dict[OwnerKey, OwnerPods]

    def _trainer_owner(self, namespace: str, name: str) -> OwnerPods | None:
        raise NotImplementedError

    def trainer_clock(self) -> float:
        return self.clock.now()

    def trainer_pod_manifests(self, namespace: str, job: str) -> list[Manifest]:
        owner = self._trainer_owner(namespace, job)
        if owner is None:
            return []
        pods = [*owner.pods.values(), *owner.finished.values()]
        return [_slim(pod) for pod in pods]

    async def create_trainer_pod(self, pod: Manifest) -> None:
        namespace, name = object_key(pod)
        if (namespace, name) in self.pods.by_key:
            raise AlreadyExistsError("Pod", namespace, name, "already exists")
        (reference,) = pod["metadata"]["ownerReferences"]
        key: OwnerKey = ("Job", namespace, reference["name"])
        if self.store.peek("Job", namespace, reference["name"]) is None:
            raise NotFoundError("Job", namespace, reference["name"])
        owner = self._owners.setdefault(key, OwnerPods())
        if name in owner.finished:
            raise AlreadyExistsError("Pod", namespace, name, "already exists")
        manifest = copy_manifest(pod)
        manifest["metadata"]["namespace"] = namespace
        self.pods.create(manifest, pod_request(manifest), key)

    async def delete_trainer_pod(self, namespace: str, name: str) -> None:
        pod = self.pods.by_key.get((namespace, name))
        if pod is not None:
            self.pods.delete(pod)
            return
        for (kind, owner_namespace, _), owner in self._owners.items():
            if kind == "Job" and owner_namespace == namespace and name in owner.finished:
                del owner.finished[name]
                return
        raise NotFoundError("Pod", namespace, name)

    async def update_trainer_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        self.store.update_status("Job", namespace, name, status)

    def watch_trainers(self, callback: Callable[[str, str], None]) -> Unsubscribe:
        """Trainer pods leaving or finishing, and trainer Job spec changes, by TrainingJob
        (a pod being bound or starting changes no plan; the periodic resync writes its
        counts)."""

        def on_pod(event: str, pod: PodRecord) -> None:
            # only a pod leaving or finishing can change what to create or delete
            if event in ("deleting", "exited") and pod.role == ROLE_TRAINER and pod.job:
                callback(pod.namespace, pod.job)

        def on_job(event: str, obj: Manifest, old: Manifest | None) -> None:
            job = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB)
            changed = old is None or old.get("spec") != obj.get("spec")
            if job and changed and event != "DELETED":
                callback(object_key(obj)[0], job)

        self.pods.listeners.append(on_pod)
        unlisten = self.store.listen("Job", on_job)

        def unsubscribe() -> None:
            self.pods.listeners.remove(on_pod)
            unlisten()

        return unsubscribe



def _slim(pod: PodRecord) -> Manifest:
    """What the trainer controller reads of a pod (a copy; never the containers)."""
    metadata = pod.manifest["metadata"]
    status = pod.manifest.get("status") or {}
    if pod.phase in ("Pending", "Running") and not pod.terminating:  # the common case
        return {
            "metadata": {"name": pod.name, "uid": pod.uid,
                         "creationTimestamp": metadata.get("creationTimestamp")},
            "spec": {"nodeName": pod.node},
            "status": {"phase": pod.phase, "startTime": status.get("startTime")},
        }
    return {
        "metadata": {
            "name": pod.name, "namespace": pod.namespace, "uid": pod.uid,
            "creationTimestamp": metadata.get("creationTimestamp"),
            "deletionTimestamp": metadata.get("deletionTimestamp"),
        },
        "spec": {"nodeName": pod.node},
        "status": {
            "phase": status.get("phase"),
            "startTime": status.get("startTime"),
            "conditions": [dict(c) for c in status.get("conditions") or ()],
            "containerStatuses": copy_manifest(
                {"c": status.get("containerStatuses") or []})["c"],
        },
    }
