"""Kueue on Kubernetes (`edl controller --kueue`): what edl follows of it at once.

Kueue suspends and unsuspends the trainer Job (admission, preemption) and edits its pod
template (the ResourceFlavor's node labels and tolerations); it admits and evicts the
servers' Workload edl owns for a job's master and pservers. Without watches those changes
would reach edl only at its resync (30 s) or status refresh (5 s); with ``--kueue`` one
reflector follows the trainer Jobs (label ``edl.dev/role=trainer``), every change of a
Job's spec (its ``metadata.generation``) reconciling that job at once, and another the
servers' Workloads (label ``edl.dev/role=servers``), every change of Kueue's admission of
one refreshing that job at once. A queued job's status then says why it waits in
Kueue's words, read from its Workloads.

All need RBAC that edl's default role does not grant (``list``/``watch`` on Jobs and on
Kueue's Workloads): deploy/kueue-rbac.yaml, applied only on a cluster that runs Kueue.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from edl.accounting import pod_request
from edl.accounting.kueue import (
    JOB_UID_LABEL,
    PRIORITY_LABEL,
    admissible_trainers,
    cluster_queue_room,
    elastic,
    queued,
    workload_words,
)
from edl.accounting.kueue_servers import (
    ServersAdmission,
    admission_of,
    admitted_flavors,
    released_status,
    servers_workload,
    servers_workload_name,
)
from edl.api.names import LABEL_JOB, LABEL_ROLE, ROLE_PSERVER, ROLE_TRAINER
from edl.cluster.port import ClusterError, Manifest, NotFoundError
from edl.kube.reflector import FingerprintStore, Reflector

if TYPE_CHECKING:
    from lightkube import AsyncClient

log = logging.getLogger(__name__)

Workload = create_namespaced_resource("kueue.x-k8s.io", "v1beta2", "Workload", "workloads")
ClusterQueue = create_global_resource("kueue.x-k8s.io", "v1beta2", "ClusterQueue",
                                      "clusterqueues")
ResourceFlavor = create_global_resource("kueue.x-k8s.io", "v1beta2", "ResourceFlavor",
                                        "resourceflavors")
WorkloadPriorityClass = create_global_resource("kueue.x-k8s.io", "v1beta2",
                                               "WorkloadPriorityClass",
                                               "workloadpriorityclasses")
TRAINER_JOB_SELECTOR = "edl.dev/role=trainer"
SERVERS_ROLE = "servers"  # the edl.dev/role label of a servers' Workload (kueue_servers)


class TrainerJobStore(FingerprintStore):
    """`reflector.Store` for trainer Jobs: tells ``changed(namespace, job)`` when a Job's
    spec changed (its generation), it appeared or went; status writes (edl's own,
    several a second) change no generation and tell nothing."""

    def __init__(self, changed: Callable[[str, str], None]) -> None:
        super().__init__()
        self._tell = changed

    def key(self, obj: dict[str, Any]) -> tuple[str, str] | None:
        meta = obj.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(LABEL_JOB)
        return (str(meta.get("namespace") or "default"), str(owner)) if owner else None

    def fingerprint(self, obj: dict[str, Any]) -> Hashable:
        return (obj.get("metadata") or {}).get("generation")

    def changed(self, key: tuple[str, str], obj: dict[str, Any] | None) -> None:
        self._tell(*key)


class ServersWorkloadStore(FingerprintStore):
    """`reflector.Store` for servers' Workloads: tells each listener ``(namespace, job)``
    when Kueue's admission of one changed (quota reserved, admitted, evicted, given back)
    or it appeared or went; other writes (Kueue's messages, spec) tell nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.listeners: list[Callable[[str, str], None]] = []

    def key(self, obj: dict[str, Any]) -> tuple[str, str] | None:
        labels = _labels(obj)
        owner = labels.get(LABEL_JOB)
        if not owner or labels.get(LABEL_ROLE) != SERVERS_ROLE:
            return None  # a trainer Job's Workload, or anyone's: its Job watch covers it
        return (str((obj.get("metadata") or {}).get("namespace") or "default"), str(owner))

    def fingerprint(self, obj: dict[str, Any]) -> Hashable:
        return _admission_state(obj)

    def changed(self, key: tuple[str, str], obj: dict[str, Any] | None) -> None:
        for callback in list(self.listeners):
            callback(*key)


def _admission_state(workload: Mapping[str, Any]) -> tuple[Any, ...]:
    """What `admission_of` decides on: the conditions' statuses and whether it is admitted."""
    status = workload.get("status") or {}
    conditions = {str(c.get("type")): c.get("status") for c in status.get("conditions") or ()}
    return (bool(status.get("admission")),
            *(conditions.get(kind) for kind in ("QuotaReserved", "Admitted", "Evicted")))


def kueue_reflectors(client: AsyncClient, namespace: str, jobs: TrainerJobStore,
                     servers: ServersWorkloadStore) -> list[Reflector]:
    """The watches ``--kueue`` adds: trainer Jobs and servers' Workloads."""
    return [Reflector(client, Job, jobs, namespace=namespace, labels={LABEL_ROLE: ROLE_TRAINER}),
            Reflector(client, Workload, servers, namespace=namespace,
                      labels={LABEL_ROLE: SERVERS_ROLE})]


class KubeKueue:
    """Reads of Kueue's Workloads (a mixin of `KubeCluster`)."""

    client: AsyncClient
    kueue: bool
    servers_store: ServersWorkloadStore | None

    def watch_servers(self, callback: Callable[[str, str], None]) -> Callable[[], None]:
        """Tell ``callback(namespace, job)`` when Kueue admits or evicts a job's servers'
        Workload (``--kueue``); returns the function that stops telling."""
        store = self.servers_store
        if store is None:
            return lambda: None
        store.listeners.append(callback)
        return lambda: store.listeners.remove(callback) if callback in store.listeners else None

    async def _call(self, what: str, call: Callable[[], Any], kind: str, namespace: str,
                    name: str, *, write: bool = True) -> Any:
        raise NotImplementedError

    async def servers_admission(self, job: Manifest, master: Manifest,
                                pserver: Manifest | None) -> ServersAdmission | None:
        """Where Kueue stands on this queued TrainingJob's master and pservers (its
        servers' Workload, `edl.accounting.kueue_servers`, created here when missing);
        None when Kueue does not queue the job (``--kueue`` off, no LocalQueue label)."""
        meta = job.get("metadata") or {}
        if not (self.kueue and queued(job)):
            return None
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        wanted = servers_workload_name(name)
        try:
            workload = _dict(await self._call(
                f"get Workload {namespace}/{wanted}",
                lambda: self.client.get(Workload, wanted, namespace=namespace),
                "Workload", namespace, wanted, write=False))
        except NotFoundError:
            priority = await self._priority(str(_labels(job).get(PRIORITY_LABEL) or ""))
            manifest = servers_workload(job, master, pserver, priority)
            workload = _dict(await self._call(
                f"create Workload {namespace}/{wanted}",
                lambda: self.client.create(Workload.from_dict(manifest)),
                "Workload", namespace, wanted))
        flavors = {flavor: await self._flavor(flavor) for flavor in admitted_flavors(workload)}
        return admission_of(workload, flavors)

    async def _flavor(self, name: str) -> dict[str, Any]:
        return _dict(await self._call(f"get ResourceFlavor {name}",
                                      lambda: self.client.get(ResourceFlavor, name),
                                      "ResourceFlavor", "", name, write=False))

    async def _priority(self, name: str) -> int | None:
        if not name:
            return None
        found = _dict(await self._call(
            f"get WorkloadPriorityClass {name}",
            lambda: self.client.get(WorkloadPriorityClass, name),
            "WorkloadPriorityClass", "", name, write=False))
        return int(found.get("value") or 0)

    async def release_servers(self, namespace: str, name: str) -> None:
        """Give an evicted servers' Workload's quota back, once the job's children are
        gone, so that it queues again (the job side of Kueue's eviction)."""
        wanted = servers_workload_name(name)
        workload = _dict(await self._call(
            f"get Workload {namespace}/{wanted}",
            lambda: self.client.get(Workload, wanted, namespace=namespace),
            "Workload", namespace, wanted, write=False))
        patch = {"metadata": {"resourceVersion": workload["metadata"]["resourceVersion"]},
                 "status": released_status(workload)}
        await self._call(f"release Workload {namespace}/{wanted}",
                         lambda: self.client.patch(Workload.Status, wanted, patch,
                                                   namespace=namespace,
                                                   patch_type=PatchType.MERGE),
                         "Workload", namespace, wanted)

    async def pservers_stopping(self, namespace: str, name: str) -> bool:
        """Whether a pserver pod of the job is still there (within its grace period): its
        final checkpoint is registered in the master pod's etcd, so an evicted job's
        master goes only after its pservers (`edl.control.queue_gate`)."""
        labels: dict[str, Any] = {LABEL_JOB: name, LABEL_ROLE: ROLE_PSERVER}

        async def pods() -> list[dict[str, Any]]:
            return [_dict(p) async for p in self.client.list(Pod, namespace=namespace,
                                                             labels=labels)]

        found = await self._call(f"list pserver pods of {namespace}/{name}", pods, "Pod",
                                 namespace, f"{name}-pserver", write=False)
        return any(still_stopping(pod, time.time()) for pod in found)

    async def finish_servers(self, namespace: str, name: str) -> None:
        """Delete a finished job's servers' Workload: its quota goes back at once."""
        if not self.kueue:
            return
        wanted = servers_workload_name(name)
        with contextlib.suppress(NotFoundError):
            await self._call(f"delete Workload {namespace}/{wanted}",
                             lambda: self.client.delete(Workload, wanted, namespace=namespace),
                             "Workload", namespace, wanted)

    async def _workloads(self, trainer: Manifest) -> list[dict[str, Any]]:
        meta = trainer.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        return [w.to_dict() if hasattr(w, "to_dict") else dict(w)
                async for w in self.client.list(Workload, namespace=namespace,
                                                labels={JOB_UID_LABEL: str(meta.get("uid"))})]

    async def queue_room(self, trainer: Manifest) -> int | None:
        """The most trainers Kueue can admit for this elastic trainer Job now: its admitted
        count plus what its ClusterQueue (with its cohort) still holds; None when Kueue
        does not size it (not queued, not elastic, not admitted, ``--kueue`` off)."""
        meta = trainer.get("metadata") or {}
        if not (self.kueue and meta.get("uid") and queued(trainer) and elastic(trainer)):
            return None
        try:
            admitted = [w for w in await self._workloads(trainer) if _admitted(w)]
            if not admitted:
                return None
            workload = admitted[-1]
            assignment = workload["status"]["admission"]
            count = sum(int(a.get("count") or 0) for a in assignment["podSetAssignments"])
            queue = (await self.client.get(ClusterQueue, assignment["clusterQueue"])).to_dict()
            cohort_name = (queue.get("spec") or {}).get("cohortName")
            cohort = [q.to_dict() async for q in self.client.list(ClusterQueue)
                      if (q.to_dict().get("spec") or {}).get("cohortName") == cohort_name
                      ] if cohort_name else []
        except Exception as error:  # planning goes on without the cap; said once per tick
            log.warning("Kueue room of trainer Job %s/%s not read: %s",
                        meta.get("namespace"), meta.get("name"), error)
            return None
        template = ((trainer.get("spec") or {}).get("template") or {}).get("spec") or {}
        request = pod_request({"spec": template})
        per_pod = {"cpu": request.cpu_request_milli, "memory": request.memory_request_mega}
        return admissible_trainers(count, per_pod, cluster_queue_room(queue, cohort))

    async def queue_words(self, trainer: Manifest) -> str:
        """Why Kueue holds (or has admitted) this trainer Job, in Kueue's words; "" when
        it is not queued, ``--kueue`` is off, or Kueue has no Workload for it yet."""
        meta = trainer.get("metadata") or {}
        uid = meta.get("uid")
        if not (self.kueue and uid and queued(trainer)):
            return ""
        namespace = str(meta.get("namespace") or "default")
        try:
            found = await self._workloads(trainer)
        except Exception as error:  # the status says less; the job is not affected
            log.warning("Workloads of trainer Job %s/%s not read: %s", namespace,
                        meta.get("name"), error)
            raise ClusterError("Workload", namespace, str(meta.get("name")),
                               str(error)) from error
        return workload_words(found)


GRACE_SLACK_S = 5.0  # past its deletionTimestamp a pod on a lost node blocks no longer


def still_stopping(pod: Mapping[str, Any], now: float) -> bool:
    """A pod not ended and, if being deleted, not past its grace period's end (its
    ``deletionTimestamp``) by more than `GRACE_SLACK_S`."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
    if not deleting:
        return True
    if isinstance(deleting, str):
        deleting = datetime.fromisoformat(deleting)
    return bool(deleting.timestamp() + GRACE_SLACK_S > now)


def _dict(obj: Any) -> dict[str, Any]:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _admitted(workload: Mapping[str, Any]) -> bool:
    conditions = {c.get("type"): c.get("status")
                  for c in (workload.get("status") or {}).get("conditions") or ()}
    return (conditions.get("Admitted") == "True" and conditions.get("Finished") != "True"
            and bool((workload.get("status") or {}).get("admission")))
