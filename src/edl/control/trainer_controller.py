"""`TrainerController`: runs the pods of managed trainer Jobs (`edl.control.trainers`
rules) through a cluster's `ManagedTrainers` calls.

One reconcile per job at a time; events (a trainer pod changed, the Autoscaler
changed parallelism) mark a job dirty and a task reconciles it on the next loop
iteration, so a burst of events costs one pass. As upstream's Job controller:

* **expectations** (``ControllerExpectations``): after creating or deleting pods,
  the job is not planned again until the pod watch shows those changes (or
  ``EXPECTATIONS_TTL_S`` passed), so a lagging watch never makes extra trainers;
* pods are **claimed by the Job's UID** (`trainer_pods.claimed`);
* creations go in **slow-start batches** (1, 2, 4 …), stopping at the first
  refusal, which becomes a ``FailedCreate`` Event and the TrainingJob's status in
  the API server's words;
* the status write is a compare-and-swap on the status it was computed from (another
  writer's change re-plans), and only after it landed are finished pods marked counted;
* a live pod owned by the Job that edl did not create means another controller runs
  it (a kube-controller-manager ignoring ``managedBy``): reported, and edl stands back
  until that writer is quiet (`trainers.foreign_active`);
* the tracking finalizer never stays behind: a counted pod loses it in the patch that
  marks it counted, a pod that does not count and every pod of a finished Job at once,
  and an orphan (its Job gone or replaced, its TrainingJob deleted) as soon as a pod
  event shows it, as upstream's ``syncOrphanPod``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass, field
from typing import Protocol

from edl.api.installation import MANAGED_BY_PREFIX
from edl.api.installation import current as installation
from edl.api.names import trainer_job_name
from edl.cluster.port import (
    AlreadyExistsError,
    Cluster,
    ClusterError,
    ConflictError,
    CrashBackoff,
    ManagedTrainers,
    Manifest,
    NotFoundError,
    Unsubscribe,
)
from edl.control.placement import hint, prefer_node
from edl.control.trainer_pods import (
    TrainerPodState,
    claimed,
    name_source,
    pod_name,
    pod_state,
    trainer_pod,
)
from edl.control.trainers import (
    CRASH_BACKOFF_BASE_S,
    CRASH_BACKOFF_MAX_S,
    CrashRecord,
    TrainerPlan,
    is_managed,
    job_status,
    plan_trainers,
)

log = logging.getLogger(__name__)
JobKey = tuple[str, str]
RESYNC_S = 30.0  # a job is reconciled at least this often, events or not
EXPECTATIONS_TTL_S = 60.0  # upstream waits 5 min; a lost event heals sooner here
STATUS_FIELDS = ("active", "ready", "terminating", "succeeded", "failed",
                 "uncountedTerminatedPods", "startTime", "conditions", "completionTime")


@dataclass
class Expectations:
    """Pods this controller created or deleted that the watch has not shown yet."""

    creates: set[str] = field(default_factory=set)
    deletes: set[str] = field(default_factory=set)
    since: float = 0.0

    def satisfied(self, pods: list[TrainerPodState], now: float) -> bool:
        seen = {p.name: p for p in pods}
        self.creates -= set(seen)
        self.deletes = {n for n in self.deletes
                        if n in seen and not (seen[n].deleting or seen[n].finished)}
        if (self.creates or self.deletes) and now - self.since >= EXPECTATIONS_TTL_S:
            log.warning("trainer pods %s not seen in %.0f s: planning without them",
                        sorted(self.creates | self.deletes), EXPECTATIONS_TTL_S)
            self.creates.clear()
            self.deletes.clear()
        return not self.creates and not self.deletes


@dataclass
class _Tracked:
    record: CrashRecord
    names: dict[str, random.Random] = field(default_factory=dict)  # by trainer Job uid
    expectations: Expectations = field(default_factory=Expectations)
    marked: set[str] = field(default_factory=set)  # pods marked counted (or being marked)
    warned: str = ""  # the last problem posted as an Event (each is posted once)


class ManagedTrainerCluster(Cluster, ManagedTrainers, Protocol):
    """A `Cluster` with the `ManagedTrainers` capability: what this controller drives."""


class TrainerController:
    """Keeps each tracked job's managed trainer Job at its parallelism."""

    def __init__(self, cluster: ManagedTrainerCluster) -> None:
        self.cluster = cluster
        self._jobs: dict[JobKey, _Tracked] = {}
        self._dirty: dict[JobKey, None] = {}
        self._task: asyncio.Task[None] | None = None
        self._timers: dict[JobKey, asyncio.TimerHandle] = {}
        self._unwatch: Unsubscribe | None = None
        self._reconciled: dict[JobKey, float] = {}  # loop time of each job's last reconcile
        self._hinted: dict[JobKey, str] = {}  # the placement hint last used, per job
        self._started = cluster.trainer_clock()

    @property
    def records(self) -> dict[JobKey, CrashRecord]:
        return {key: tracked.record for key, tracked in self._jobs.items()}

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
        if key not in self._jobs:
            self._jobs[key] = _Tracked(CrashRecord())
        self.poke(key)

    def forget(self, key: JobKey) -> None:
        self._jobs.pop(key, None)
        self._reconciled.pop(key, None)
        self._hinted.pop(key, None)
        self._dirty.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def record(self, key: JobKey) -> CrashRecord | None:
        tracked = self._jobs.get(key)
        return tracked.record if tracked is not None else None

    def poke(self, key: JobKey) -> None:
        """Reconcile this job soon (coalesced with other events); a job not tracked
        (deleted, or not seen yet) only has its orphans' finalizers removed."""
        if key not in self._jobs and not self._holding(key):
            return
        self._dirty[key] = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def resync(self) -> None:
        """Reconcile every job not reconciled for ``RESYNC_S`` (heals a missed event;
        events keep the others current), and sweep the orphans of jobs not tracked (a
        TrainingJob deleted while no controller ran: no pod event comes)."""
        now = asyncio.get_running_loop().time()
        for key in list(self._jobs) + [k for k in self.cluster.trainer_pod_jobs()
                                       if k not in self._jobs]:
            if now - self._reconciled.get(key, float("-inf")) >= RESYNC_S:
                self.poke(key)

    async def _drain(self) -> None:
        while self._dirty:
            key = next(iter(self._dirty))
            del self._dirty[key]
            try:
                await self.reconcile(key)
            except ConflictError as error:  # the Job changed since our read: plan again
                log.debug("trainers of %s/%s: %s; re-reading", *key, error)
                self._retry_at(key, 0.0)
            except ClusterError as error:  # transient: the next event or resync retries
                log.warning("trainers of %s/%s not reconciled: %s", *key, error)
            except Exception:
                log.exception("trainers of %s/%s not reconciled", *key)

    def _holding(self, key: JobKey) -> list[TrainerPodState]:
        """The pods of this TrainingJob that hold edl's tracking finalizer."""
        return [p for p in (pod_state(m) for m in self.cluster.trainer_pod_manifests(*key))
                if p.tracked and p.ours]

    async def _release_orphans(self, key: JobKey) -> None:
        """Remove the finalizer of pods whose trainer Job is gone, being deleted or
        another one (a job not tracked: deleted, or not seen yet after a start)."""
        held = self._holding(key)
        if not held:
            if key not in self._jobs:
                self._reconciled.pop(key, None)
            return
        namespace, name = key
        try:
            job = await self.cluster.get_trainer_job_by_name(namespace, trainer_job_name(name))
        except NotFoundError:
            job = {}
        meta = job.get("metadata") or {}
        uid = None if meta.get("deletionTimestamp") else meta.get("uid")
        await self._release(namespace, [p.name for p in held if uid is None
                                        or p.owner_uid != uid])

    async def _release(self, namespace: str, names: list[str]) -> None:
        """Mark counted and remove the tracking finalizer (pods with nothing to count)."""
        for pod in names:
            with contextlib.suppress(NotFoundError):
                await self.cluster.mark_trainer_pod_counted(namespace, pod)

    async def reconcile(self, key: JobKey) -> None:
        tracked = self._jobs.get(key)
        loop_now = asyncio.get_running_loop().time()
        self._reconciled[key] = loop_now
        if tracked is None:
            await self._release_orphans(key)
            return
        namespace, name = key
        try:
            job = await self.cluster.get_trainer_job_by_name(namespace, trainer_job_name(name))
        except NotFoundError:
            await self._release_orphans(key)
            return
        if not is_managed(job):
            owner = str((job.get("spec") or {}).get("managedBy") or "")
            if owner.startswith(MANAGED_BY_PREFIX):  # another installation's trainer Job
                await self._report(key, tracked, "AnotherInstallation", (
                    f"trainer Job {trainer_job_name(name)} is run by edl installation "
                    f"{owner.removeprefix(MANAGED_BY_PREFIX)} (spec.managedBy {owner}), "
                    f"not by this one ({installation()}): edl leaves it alone"))
            return  # else the cluster's Job controller runs it (managedBy dropped or absent)
        if (job.get("metadata") or {}).get("deletionTimestamp"):
            await self._release_orphans(key)  # being deleted: no pod, every finalizer goes
            return
        seen = [pod_state(p) for p in self.cluster.trainer_pod_manifests(namespace, name)]
        if not tracked.expectations.satisfied(seen, loop_now):
            return  # the watch has not caught up with our own changes: its event pokes
        pods = claimed(job, seen)
        mine = {p.name for p in pods}
        orphans = [p.name for p in seen if p.tracked and p.ours and p.name not in mine]
        now = self.cluster.trainer_clock()
        base_s, max_s = (self.cluster.crash_backoff_s if isinstance(self.cluster, CrashBackoff)
                         else (CRASH_BACKOFF_BASE_S, CRASH_BACKOFF_MAX_S))
        plan = plan_trainers(job, pods, tracked.record, now, base_s, max_s)
        if plan.foreign:
            await self._report(key, tracked, "AnotherController", (
                f"trainer Job {trainer_job_name(name)} has pods edl did not create "
                f"({', '.join(sorted(plan.foreign)[:3])}): another controller runs it "
                "(a kube-controller-manager without JobManagedBy?); edl leaves it alone"))
            return
        deleted = await self._delete(namespace, tracked, plan.delete)
        await self._release(namespace, orphans + list(plan.release))
        await self._delete(namespace, tracked, plan.prune)
        if plan.finished:
            return  # a finished Job's status is final
        names = tracked.names.setdefault(
            str(job["metadata"].get("uid")),
            name_source(f"{namespace}/{name}/{job['metadata'].get('uid')}@{self._started!r}"))
        created = await self._create(key, tracked, job, plan.create, names)
        status = job_status(job, plan, created, deleted, now)
        previous = job.get("status") or {}
        if any(status.get(k) != previous.get(k) for k in STATUS_FIELDS):
            try:
                await self.cluster.update_trainer_job_status(
                    namespace, trainer_job_name(name), status, previous)
            except NotFoundError:
                return
        await self._mark(namespace, tracked, plan)
        if plan.retry_at is not None:
            self._retry_at(key, plan.retry_at - now)

    async def _delete(self, namespace: str, tracked: _Tracked, names: tuple[str, ...]) -> int:
        deleted = 0
        for pod in names:
            with contextlib.suppress(NotFoundError):
                await self.cluster.delete_trainer_pod(namespace, pod)
                deleted += 1
                self._expect(tracked, deletes=pod)
        return deleted

    async def _mark(self, namespace: str, tracked: _Tracked, plan: TrainerPlan) -> None:
        """Mark counted the finished pods whose UIDs the status now holds (their next
        watch event folds them into the counters)."""
        for pod in plan.ledger.mark:
            if pod in tracked.marked:
                continue
            with contextlib.suppress(NotFoundError):
                await self.cluster.mark_trainer_pod_counted(namespace, pod)
            tracked.marked.add(pod)

    async def _create(self, key: JobKey, tracked: _Tracked, job: Manifest, count: int,
                      names: random.Random) -> int:
        """Create ``count`` pods in slow-start batches (1, 2, 4 …); a refusal stops them
        and is reported. Returns how many were created."""
        made, batch = 0, 1
        nodes = self._planned_nodes(key, job) if count else []
        while made < count:
            pods: list[Manifest] = []
            for _ in range(min(batch, count - made)):
                pod = trainer_pod(job, pod_name(job["metadata"]["name"], names))
                if made + len(pods) < len(nodes):
                    pod = prefer_node(pod, nodes[made + len(pods)])
                pods.append(pod)
            results = await asyncio.gather(*(self._create_one(tracked, p) for p in pods))
            made += sum(1 for r in results if r is None)
            refusals = [r for r in results if r is not None]
            if refusals:
                await self._report(key, tracked, "FailedCreate",
                                   f"trainer pods not created: {refusals[0]}")
                return made
            batch *= 2
        if count and tracked.record.problem.startswith("trainer pods not created"):
            tracked.record.problem = tracked.warned = ""
        return made

    async def _create_one(self, tracked: _Tracked, pod: Manifest) -> str | None:
        """None once created; else the API server's refusal."""
        name = pod["metadata"]["name"]
        try:
            await self.cluster.create_trainer_pod(pod)
        except AlreadyExistsError:
            pass  # our own retried create, or a rare clash: the watch shows which (claims)
        except ClusterError as error:
            return error.detail or str(error)
        self._expect(tracked, creates=name)
        return None

    def _expect(self, tracked: _Tracked, creates: str = "", deletes: str = "") -> None:
        expectations = tracked.expectations
        if not expectations.creates and not expectations.deletes:
            expectations.since = asyncio.get_running_loop().time()
        if creates:
            expectations.creates.add(creates)
        if deletes:
            expectations.deletes.add(deletes)

    async def _report(self, key: JobKey, tracked: _Tracked, reason: str, message: str) -> None:
        """Say why the trainers are not as asked: in the TrainingJob's status (through the
        record) and once as a Warning Event."""
        tracked.record.problem = message
        if tracked.warned == message:
            return
        tracked.warned = message
        log.warning("trainers of %s/%s: %s", *key, message)
        post = getattr(self.cluster, "post_trainer_event", None)
        if post is not None:
            with contextlib.suppress(ClusterError):
                await post(key[0], key[1], reason, message)

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
