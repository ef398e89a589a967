"""A TrainingJob's child objects: create, delete, stop, compare, and why they lack pods.

The Controller (`edl.control.controller`) decides *when* to act on a job's master
Service, master and pserver ReplicaSets and trainer Job; these functions say *how*,
talking to the cluster only through `edl.cluster.port.Cluster`. They keep no state:
what the Controller remembers of a job (stopped, the refusal last posted) it passes
in and stores from their results.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

from edl.accounting.kueue_servers import Placement, place
from edl.api.names import job_key, trainer_job_name
from edl.api.trainingjob import TrainingJob
from edl.cluster.port import (
    AlreadyExistsError,
    Cluster,
    ClusterError,
    NotFoundError,
    ServerScaling,
)
from edl.control.drift import unapplied
from edl.control.job_status import replica_failure
from edl.jobparser import JobParser

log = logging.getLogger(__name__)


async def create_children(cluster: Cluster, parser: JobParser, job: TrainingJob,
                          placement: Mapping[str, Placement] | None = None) -> None:
    """Create the job's master Service, master and pserver ReplicaSets and trainer Job
    (the master's and pservers' pods placed by `placement`: Kueue's admission)."""
    placement = placement or {}
    creations = [
        (cluster.create_service, parser.parse_to_service(job)),
        (cluster.create_replica_set, place(parser.parse_to_master(job),
                                           placement.get("master"))),
    ]
    if not job.collective():  # a collective job has no pservers
        creations.append((cluster.create_replica_set, place(parser.parse_to_pserver(job),
                                                            placement.get("pserver"))))
    creations.append((cluster.create_job, parser.parse_to_trainer(job)))
    for create, manifest in creations:
        # idempotent: a child that exists from an earlier event or run is kept
        with contextlib.suppress(AlreadyExistsError):
            await create(manifest)


async def stop_servers(cluster: Cluster, job: TrainingJob) -> bool:
    """Scale a finished job's master and pserver ReplicaSets to 0; whether they were
    (False on a cluster that cannot scale them, or on a failure: the caller retries)."""
    if not isinstance(cluster, ServerScaling):
        return False
    namespace, name = job_key(job)
    roles = ("master",) if job.collective() else ("master", "pserver")
    try:
        for role in roles:
            with contextlib.suppress(NotFoundError):
                await cluster.scale_replica_set(namespace, f"{name}-{role}", 0)
        finish = getattr(cluster, "finish_servers", None)  # Kueue: its quota goes back
        if finish is not None:
            await finish(namespace, name)
    except ClusterError as error:
        log.warning("master and pservers of finished %s/%s not stopped: %s", namespace,
                    name, error)
        return False
    return True


async def unapplied_roles(cluster: Cluster, parser: JobParser, job: TrainingJob) -> str:
    """After an edit: which roles' pods still run the old template (`drift`)."""
    namespace, name = job_key(job)
    pairs = []
    try:
        pairs.append(("trainer", parser.parse_to_trainer(job),
                      await cluster.get_trainer_job(job)))
        pairs.append(("master", parser.parse_to_master(job),
                      await cluster.get_replica_set(namespace, f"{name}-master")))
        if not job.collective():
            pairs.append(("pserver", parser.parse_to_pserver(job), await
                          cluster.get_replica_set(namespace, f"{name}-pserver")))
    except ClusterError as error:
        log.warning("children of %s/%s not compared after an edit: %s", *job_key(job),
                    error)
    return unapplied(pairs)


async def delete_children(cluster: Cluster, namespace: str, name: str) -> None:
    """Delete the job's children (missing ones are fine)."""
    deletions = [
        (cluster.delete_trainer_job, trainer_job_name(name)),
        (cluster.delete_replica_set, f"{name}-pserver"),
        (cluster.delete_replica_set, f"{name}-master"),
        (cluster.delete_service, f"{name}-master"),
    ]
    for delete, child in deletions:
        with contextlib.suppress(NotFoundError):
            await delete(namespace, child)


async def delete_job(cluster: Cluster, namespace: str, name: str) -> None:
    """A deleted TrainingJob: its children, and its servers' Workload under Kueue (which
    the API server's garbage collector would also delete, by its ownerReference)."""
    await delete_children(cluster, namespace, name)
    finish = getattr(cluster, "finish_servers", None)
    if finish is not None:
        await finish(namespace, name)


async def children_refused(cluster: Cluster, job: TrainingJob, warned: str) -> str:
    """Why the master's or pservers' pods cannot be created, in the API server's words
    (their ReplicaSet's ``ReplicaFailure``); posted as a Warning Event unless it is
    ``warned``, the refusal posted last time. Read only while the pod cache lacks some
    of those pods, so a healthy job costs no API call."""
    count = getattr(cluster, "role_pods", None)
    if count is None:
        return ""
    namespace, name = job_key(job)
    roles = [("master", 1)]
    if not job.collective():
        roles.append(("pserver", job.spec.pserver.min_instance or 0))
    refused = ""
    for role, wanted in roles:
        if await count(job, role) >= wanted:
            continue
        try:
            failure = replica_failure(
                await cluster.get_replica_set(namespace, f"{name}-{role}"))
        except ClusterError:
            continue
        if failure:
            refused = f"{role} pods not created: {failure}"
            break
    if refused and refused != warned:
        log.warning("%s/%s: %s", namespace, name, refused)
        post = getattr(cluster, "post_trainer_event", None)
        if post is not None:
            with contextlib.suppress(ClusterError):
                await post(namespace, name, "FailedCreate", refused)
    return refused
