"""`TrainerController`: runs the pods of managed trainer Jobs (`edl.control.trainers` rules)
through a cluster's `ManagedTrainers` calls.

One reconcile per job at a time; events (a trainer pod changed, the Autoscaler
changed parallelism) mark a job dirty and a task reconciles it on the next loop
iteration, so a burst of events costs one pass, and a scale-up's pods are
created in the same pass that sees the new parallelism. A crash replacement
that must wait sets a timer for the end of its delay. Trainers created for a
growth the Autoscaler planned onto named nodes prefer those nodes
(`edl.control.placement`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from edl.api.names import trainer_job_name
from edl.cluster.port import (
    AlreadyExistsError,
    Cluster,
    ClusterError,
    CrashBackoff,
    ManagedTrainers,
    Manifest,
    NotFoundError,
    Unsubscribe,
)
from edl.control.placement import hint, prefer_node
from edl.control.trainers import (
    CRASH_BACKOFF_BASE_S,
    CRASH_BACKOFF_MAX_S,
    CrashRecord,
    is_managed,
    job_status,
    plan_trainers,
    pod_state,
    trainer_pod,
)

log = logging.getLogger(__name__)
JobKey = tuple[str, str]
RESYNC_S = 30.0  # a job is reconciled at least this often, events or not


class ManagedTrainerCluster(Cluster, ManagedTrainers, Protocol):
    """A `Cluster` with the `ManagedTrainers` capability: what this controller drives."""


class TrainerController:
    """Keeps each tracked job's managed trainer Job at its parallelism."""

    def __init__(self, cluster: ManagedTrainerCluster) -> None:
        self.cluster = cluster
        self.records: dict[JobKey, CrashRecord] = {}
        self._created: dict[JobKey, int] = {}  # pods created so far (names the next one)
        self._dirty: dict[JobKey, None] = {}
        self._task: asyncio.Task[None] | None = None
        self._timers: dict[JobKey, asyncio.TimerHandle] = {}
        self._unwatch: Unsubscribe | None = None
        self._reconciled: dict[JobKey, float] = {}  # loop time of each job's last reconcile
        self._hinted: dict[JobKey, str] = {}  # the placement hint last used, per job

    def watch(self) -> Unsubscribe:
        """Follow the cluster's trainer events (done by the first `track`); returns the
        function that stops following them."""
        if self._unwatch is None:
            self._unwatch = self.cluster.watch_trainers(
                lambda namespace, job: self.poke((namespace, job)))

        def stop() -> None:
            if self._unwatch is not None:
                self._unwatch()
                self._unwatch = None

        return stop

    def track(self, key: JobKey) -> None:
        self.watch()
        self.records.setdefault(key, CrashRecord())
        self.poke(key)

    def forget(self, key: JobKey) -> None:
        self.records.pop(key, None)
        self._reconciled.pop(key, None)
        self._created.pop(key, None)
        self._hinted.pop(key, None)
        self._dirty.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def record(self, key: JobKey) -> CrashRecord | None:
        return self.records.get(key)

    def poke(self, key: JobKey) -> None:
        """Reconcile this job soon (coalesced with other events)."""
        if key not in self.records:
            return
        self._dirty[key] = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def resync(self) -> None:
        """Reconcile every job not reconciled for ``RESYNC_S`` (heals a missed event;
        events keep the others current)."""
        now = asyncio.get_running_loop().time()
        for key in list(self.records):
            if now - self._reconciled.get(key, float("-inf")) >= RESYNC_S:
                self.poke(key)

    async def _drain(self) -> None:
        while self._dirty:
            key = next(iter(self._dirty))
            del self._dirty[key]
            try:
                await self.reconcile(key)
            except ClusterError as error:  # transient: the next event or resync retries
                log.warning("trainers of %s/%s not reconciled: %s", *key, error)
            except Exception:
                log.exception("trainers of %s/%s not reconciled", *key)

    async def reconcile(self, key: JobKey) -> None:
        record = self.records.get(key)
        if record is None:
            return
        self._reconciled[key] = asyncio.get_running_loop().time()
        namespace, name = key
        try:
            job = await self.cluster.get_trainer_job_by_name(namespace, trainer_job_name(name))
        except NotFoundError:
            return
        if not is_managed(job):
            return  # the cluster's Job controller runs it (managedBy dropped or absent)
        status = job.get("status") or {}
        if not record.seen and not record.failed:  # after a restart: counts from the status
            record.failed = int(status.get("failed") or 0)
            record.succeeded = int(status.get("succeeded") or 0)
        now = self.cluster.trainer_clock()
        pods = [pod_state(p) for p in self.cluster.trainer_pod_manifests(namespace, name)]
        base_s, max_s = (self.cluster.crash_backoff_s if isinstance(self.cluster, CrashBackoff)
                         else (CRASH_BACKOFF_BASE_S, CRASH_BACKOFF_MAX_S))
        plan = plan_trainers(job["spec"], pods, record, now, base_s, max_s)
        for pod in (*plan.collect, *plan.delete):
            with contextlib.suppress(NotFoundError):
                await self.cluster.delete_trainer_pod(namespace, pod)
        await self._create(key, job, plan.create)
        new_status = job_status(plan, record, status, now)
        if plan.create:
            new_status["active"] = plan.active + plan.create
        if _counts(new_status) != _counts(status):
            with contextlib.suppress(NotFoundError):
                await self.cluster.update_trainer_job_status(
                    namespace, trainer_job_name(name), new_status)
        if plan.retry_at is not None:
            self._retry_at(key, plan.retry_at - now)

    async def _create(self, key: JobKey, job: Manifest, count: int) -> None:
        made = 0
        index = self._created.get(key, 0)
        nodes = self._planned_nodes(key, job) if count else []
        while made < count:
            pod = trainer_pod(job, index)
            if made < len(nodes):
                pod = prefer_node(pod, nodes[made])
            index += 1
            try:
                await self.cluster.create_trainer_pod(pod)
            except AlreadyExistsError:
                continue  # a name from before a restart: take the next
            finally:
                self._created[key] = index
            made += 1

    def _planned_nodes(self, key: JobKey, job: Manifest) -> list[str]:
        """The nodes the Autoscaler planned for this growth, once per hint."""
        planned = hint(job)
        if planned is None or self._hinted.get(key) == planned.token:
            return []
        self._hinted[key] = planned.token
        return list(planned.nodes)

    def _retry_at(self, key: JobKey, delay: float) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(max(delay, 0.0), self.poke, key)


def _counts(status: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(status.get(k) for k in ("active", "succeeded", "failed", "terminating",
                                         "ready", "conditions"))
