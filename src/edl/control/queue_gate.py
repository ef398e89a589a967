"""Kueue's admission of a queued TrainingJob's master and pservers (`--kueue`).

A queued job's children exist only while its servers' Workload is admitted
(`edl.accounting.kueue_servers`): the Controller asks `servers_gate` before creating
them, and at every status refresh for a queued job. Closed: the children are deleted
(an eviction: then the Workload's quota reservation is cleared so that it queues again)
and the job waits, its status in Kueue's words. Open: the children are created with the
admission's placement. A cluster without Kueue (no ``servers_admission``) is always open.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from edl.accounting.kueue import QUEUE_LABEL
from edl.accounting.kueue_servers import Placement
from edl.api.names import job_key, trainer_job_name
from edl.api.trainingjob import TrainingJob
from edl.cluster.port import Cluster, ClusterError, Manifest, NotFoundError
from edl.control.children import delete_children
from edl.jobparser import JobParser


@dataclass(frozen=True)
class Gate:
    """Whether the job's children may exist; if not, why (for its status)."""

    open: bool
    message: str = ""
    placement: Mapping[str, Placement] = field(default_factory=dict)


OPEN = Gate(True)


def kueue_queued(cluster: Cluster, job: TrainingJob) -> bool:
    """Whether Kueue admits this job's servers (``--kueue`` and a LocalQueue label)."""
    return bool(getattr(cluster, "kueue", False) and hasattr(cluster, "servers_admission")
                and (job.metadata.labels or {}).get(QUEUE_LABEL))


def _manifest(job: TrainingJob) -> Manifest:
    meta = job.metadata
    return {"metadata": {"name": meta.name, "namespace": meta.namespace or "default",
                         "uid": meta.uid, "labels": dict(meta.labels or {})}}


async def servers_gate(cluster: Cluster, parser: JobParser, job: TrainingJob,
                       running: bool) -> Gate:
    """Open when the job's children may exist; closed (and, if `running`, its children
    deleted) while Kueue has not admitted its master and pservers."""
    if not kueue_queued(cluster, job):
        return OPEN
    master = parser.parse_to_master(job)
    pserver = None if job.collective() else parser.parse_to_pserver(job)
    state = await cluster.servers_admission(  # type: ignore[attr-defined]
        _manifest(job), master, pserver)
    if state is None:
        return OPEN
    if state.admitted:
        return Gate(True, placement=state.placement)
    namespace, name = job_key(job)
    if (running or state.evicted) and not await _delete_children(cluster, namespace, name):
        return Gate(False, f"{state.words}; trainers and pservers deleted, the master kept "
                           "until the pservers have saved their checkpoints")
    if state.evicted:
        await cluster.release_servers(namespace, name)  # type: ignore[attr-defined]
        return Gate(False, f"{state.words}; trainers, master and pservers deleted, waiting "
                           "for Kueue to admit the job again")
    return Gate(False, f"master and pservers waiting for admission: {state.words}")


async def _delete_children(cluster: Cluster, namespace: str, name: str) -> bool:
    """Delete the job's children, the master (and its etcd sidecar) only once no pserver
    pod is left: a pserver's final checkpoint on SIGTERM is registered in that etcd. True
    once all are deleted; False while pservers stop (the next refresh goes on)."""
    for delete, child in ((cluster.delete_trainer_job, trainer_job_name(name)),
                          (cluster.delete_replica_set, f"{name}-pserver")):
        with contextlib.suppress(NotFoundError):
            await delete(namespace, child)
    stopping = getattr(cluster, "pservers_stopping", None)
    if stopping is not None and await stopping(namespace, name):
        return False
    await delete_children(cluster, namespace, name)
    return True


async def queue_words(cluster: Cluster, trainer: Manifest) -> str:
    """Why the queue holds this trainer Job, in its words (Kueue's Workload on a cluster
    that offers it: `edl.kube.kueue`); "" if unknown."""
    read = getattr(cluster, "queue_words", None)
    if read is None:
        return ""
    try:
        return str(await read(trainer))
    except ClusterError:
        return ""
