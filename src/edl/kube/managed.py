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

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from edl.api.names import ANNOTATION_TRAINER_PLACEMENT
from edl.cluster.port import AlreadyExistsError, ClusterError, Manifest, Unsubscribe
from edl.kube.retry import http_status
from edl.kube.trainer_index import rfc3339

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from edl.kube.state import ClusterState

TIME_FIELDS = ("startTime", "completionTime")


def scale_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata a scale patch of a trainer Job carries: the caller's resourceVersion
    (the patch is then conditional) and the Autoscaler's placement hint, if present."""
    out: dict[str, Any] = {}
    if metadata.get("resourceVersion"):
        out["resourceVersion"] = metadata["resourceVersion"]
    placement = (metadata.get("annotations") or {}).get(ANNOTATION_TRAINER_PLACEMENT)
    if placement is not None:
        out["annotations"] = {ANNOTATION_TRAINER_PLACEMENT: placement}
    return out


class KubeManagedTrainers:
    """Trainer pods and the managed trainer Job's status, through the API server."""

    client: AsyncClient
    state: ClusterState

    async def _call(self, what: str, call: Callable[[], Any], kind: str, namespace: str,
                    name: str, *, write: bool = True) -> Any:
        raise NotImplementedError

    def trainer_clock(self) -> float:
        return time.time()

    def trainer_pod_manifests(self, namespace: str, job: str) -> list[Manifest]:
        return self.state.trainer_index.pods(namespace, job)

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
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        body = dict(status)
        for field in TIME_FIELDS:
            if isinstance(body.get(field), int | float):
                body[field] = rfc3339(float(body[field]))
        await self._call(
            f"status of trainer Job {namespace}/{name}",
            lambda: self.client.patch(Job.Status, name, {"status": body}, namespace=namespace,
                                      patch_type=PatchType.MERGE),
            "Job", namespace, name)

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
        """Told after this process changed a trainer Job's parallelism (no Job watch)."""
        listeners: list[Callable[[str, str], None]] | None = getattr(
            self, "_scale_listeners", None)
        if listeners is None:
            listeners = []
            self._scale_listeners = listeners
        return listeners

    def _trainer_job_changed(self, job: Manifest) -> None:
        meta = job.get("metadata") or {}
        owner = (meta.get("labels") or {}).get("edl.dev/job")
        if owner:
            for callback in list(self._trainer_listeners()):
                callback(meta.get("namespace") or "default", owner)
