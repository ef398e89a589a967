"""`Controller`: turns TrainingJob events into child objects and a current ``status``.

PaddlePaddle EDL's Controller, async and backend-free: it talks to a cluster only
through `edl.cluster.port.Cluster`, so the same code serves Kubernetes, the
simulator (virtual time) and local runs (real time).

* ``on_add`` / ``on_update`` validate the job with the JobParser. A bad job gets
  ``status.state: Failed`` and the validation message (every wrong field), and
  the controller carries on with the other jobs.
* Children (master Service, master and pserver ReplicaSets, trainer Job) are
  created idempotently: one that already exists is left as it is, so replays of
  the same event and controller restarts are harmless.
* ``on_del`` deletes the children (missing ones are fine).
* ``run()`` watches TrainingJobs (`watch_training_jobs`) and refreshes every
  job's status every ``status_interval`` seconds, a kicked job's at once (`Kicks`):
  state, trainers desired/running/pending, message. `edl.control.loops.ControlLoops` runs it
  beside its Autoscaler.
* The Autoscaler hears about every valid job (``on_add``/``on_update``/``on_del``).
* A trainer Job that fails (condition Failed, e.g. ``BackoffLimitExceeded``)
  makes the job Failed, with the reason and, from clusters that keep it, the
  last failed trainer's error; a Complete one makes it Succeeded.
* A finished job stays finished: its state is read back from its stored status
  on every event and restart, its children are never created again (a trainer Job
  deleted by the TTL-after-finished controller or a user is not recreated), and its
  master and pserver ReplicaSets are scaled to 0.

Status writes go to the status subresource and do not change
``metadata.generation``; ``on_update`` ignores events whose generation it has
already handled, so the controller's own status writes never loop back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from edl.api.errors import JobValidationError
from edl.api.names import job_key, training_job_key
from edl.api.trainingjob import TrainingJob
from edl.cluster.port import (
    Cluster,
    ClusterError,
    ManagedTrainers,
    Manifest,
    NotFoundError,
    TrainerFailures,
    Unsubscribe,
    is_permanent,
)
from edl.control.children import (
    children_refused,
    create_children,
    delete_job,
    stop_servers,
    unapplied_roles,
)
from edl.control.job_health import HealthSource, fold_health
from edl.control.job_status import (
    CREATED,
    FAILED,
    RUNNING,
    SUSPENDED_MESSAGE,
    finished_state,
    plan_status,
    trainer_job_outcome,
    waiting_reason,
)
from edl.control.kicks import Kicks
from edl.control.queue_gate import kueue_queued, queue_words, servers_gate
from edl.control.trainer_controller import TrainerController
from edl.jobparser import JobParser

log = logging.getLogger(__name__)

CHILD_RETRY_BASE_S = 1.0  # creating children failed: retry after 1 s, doubling
CHILD_RETRY_MAX_S = 60.0


class JobListener(Protocol):
    """What the Controller tells the Autoscaler (PaddlePaddle EDL's OnAdd/OnUpdate/OnDel)."""

    def on_add(self, job: TrainingJob) -> None: ...
    def on_update(self, job: TrainingJob) -> None: ...
    def on_del(self, job: TrainingJob) -> None: ...


def _generation(obj: Mapping[str, Any]) -> int | None:
    generation = (obj.get("metadata") or {}).get("generation")
    return generation if isinstance(generation, int) else None


def _status(obj: Mapping[str, Any]) -> dict[str, Any]:
    status = obj.get("status")
    return dict(status) if isinstance(status, Mapping) else {}


def _without_status(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The user's part of a TrainingJob: status is ours, and validating it would be moot."""
    return {key: value for key, value in obj.items() if key != "status"}


@dataclass
class _Known:
    """What the controller remembers of one job."""

    generation: int | None
    job: TrainingJob | None  # None when the job is invalid
    status: dict[str, Any]
    last_trainer_failure: str | None = None  # asked once the trainer Job failed
    unapplied: str = ""  # an edit the running pods do not have (`drift.unapplied`)
    children_warned: str = ""  # the master/pserver refusal last posted as an Event
    stopped: bool = False  # finished, and its master and pservers scaled to 0
    held: bool = False  # Kueue has not admitted its master and pservers: no children


class Controller:
    """Reconciles TrainingJobs into children and keeps their status current.

    Args:
        cluster: any `Cluster` (Kubernetes, in-process).
        autoscaler: told about valid jobs; optional (None: no autoscaling).
        parser: the JobParser (defaults to `edl.jobparser.JobParser()`).
        status_interval: seconds between status refreshes in `run()`.
        health: what the jobs' processes say of their health (`job_health`); optional.
    """

    def __init__(
        self,
        cluster: Cluster,
        autoscaler: JobListener | None = None,
        parser: JobParser | None = None,
        status_interval: float = 5.0,
        health: HealthSource | None = None,
    ) -> None:
        self.cluster = cluster
        self.health = health
        self.autoscaler = autoscaler
        self.parser = parser or JobParser()
        self.status_interval = status_interval
        self._known: dict[tuple[str, str], _Known] = {}
        self._child_retries: dict[tuple[str, str], int] = {}
        self._retry_tasks: set[asyncio.Task[None]] = set()
        self._kicks = Kicks()  # jobs refreshed at once: Kueue admitted or evicted their servers
        # trainer Jobs with spec.managedBy: their pods are run here (docs/architecture.md)
        self.trainers = TrainerController(cluster) if isinstance(cluster, ManagedTrainers) else None

    # -- event handlers (the cluster's watch calls these) -----------------------------------
    async def on_add(self, obj: Manifest) -> None:
        key = training_job_key(obj)
        if key is None:
            log.warning("ignoring a TrainingJob without a usable metadata.name: %.200r", obj)
            return
        async with self._kicks.lock(key):  # never beside a kicked refresh of the same job
            await self._reconcile(key, obj)

    async def on_update(self, obj: Manifest) -> None:
        key = training_job_key(obj)
        if key is None:
            log.warning("ignoring a TrainingJob without a usable metadata.name: %.200r", obj)
            return
        known = self._known.get(key)
        generation = _generation(obj)
        if known is not None and generation is not None and known.generation == generation:
            return  # a status write (ours or anyone's): the spec we acted on is unchanged
        async with self._kicks.lock(key):  # never beside a kicked refresh of the same job
            await self._reconcile(key, obj)

    async def on_del(self, obj: Manifest) -> None:
        key = training_job_key(obj)
        if key is None:
            return  # never had children: they are named after the job
        known = self._known.pop(key, None)
        if self.health is not None:
            self.health.forget(*key)
        if known is not None and known.job is not None and self.autoscaler is not None:
            self.autoscaler.on_del(known.job)
        if self.trainers is not None:
            self.trainers.forget(key)
        self._kicks.forget(key)
        await delete_job(self.cluster, *key)

    # -- the loop ------------------------------------------------------------------------------
    def watch_training_jobs(self) -> Unsubscribe:
        """Subscribe to the cluster's TrainingJob events (PaddlePaddle EDL's WatchTrainingJobs).

        Existing jobs arrive first as ``on_add``. Returns the function that ends the
        subscription (and those to trainer pod events and to the cluster's `Kicks`)."""
        stops = [self.cluster.watch_training_jobs(self)]
        if self.trainers is not None:
            stops.append(self.trainers.watch())
        return self._kicks.follow(self.cluster, *stops)

    async def run(self) -> None:
        """Watch TrainingJobs; refresh each status every ``status_interval`` s, forever."""
        unsubscribe = self.watch_training_jobs()
        loop = asyncio.get_running_loop()
        try:
            due = loop.time() + self.status_interval
            while True:
                kicked = await self._kicks.until(due)
                if loop.time() < due:
                    await self.tick(kicked)
                    continue
                await self.tick()
                due = loop.time() + self.status_interval
        finally:
            unsubscribe()

    async def tick(self, keys: set[tuple[str, str]] | None = None) -> None:
        """Refresh the status of every known job (or of `keys`; writes only what changed);
        reconcile every managed trainer Job (a missed event heals here)."""
        if self.trainers is not None and keys is None:
            await self.trainers.resync()
        for key in list(self._known) if keys is None else sorted(keys & set(self._known)):
            try:
                async with self._kicks.lock(key):
                    await self._follow_queue(key)
                    await self._refresh_status(key)
            except ClusterError as error:
                log.warning("status of %s/%s not refreshed: %s", *key, error)
            except Exception:  # one job's odd state must not stop the others' status
                log.exception("status of %s/%s not refreshed", *key)

    # -- internals -------------------------------------------------------------------------------
    async def _reconcile(self, key: tuple[str, str], obj: Manifest) -> None:
        namespace, name = key
        generation = _generation(obj)
        previous = self._known.get(key)
        try:
            job = self.parser.validate(_without_status(obj))
        except (JobValidationError, ValueError) as error:
            log.info("TrainingJob %s/%s is invalid: %s", namespace, name, error)
            if previous is not None and previous.job is not None and self.autoscaler is not None:
                self.autoscaler.on_del(previous.job)
            known = _Known(generation, None, _status(obj))
            self._known[(namespace, name)] = known
            failed = {"state": FAILED, "message": str(error)}
            await self._write_status(namespace, name, known, failed)
            return
        known = _Known(generation, job, _status(obj))
        self._known[(namespace, name)] = known
        finished = finished_state(known.status)
        if finished is not None:  # never run again: no child is created, none scaled up
            log.info("TrainingJob %s/%s is %s: its children are not created again",
                     namespace, name, finished)
            if previous is not None and previous.job is not None and self.autoscaler:
                self.autoscaler.on_del(previous.job)
            if self.trainers is not None:
                self.trainers.track((namespace, name))  # its pods' finalizers still go
            await self._stop_servers(known)
            return
        if not await self._ensure_children(known):
            return
        if previous is not None and previous.generation != generation:
            known.unapplied = await unapplied_roles(self.cluster, self.parser, job)
        if self.trainers is not None:
            self.trainers.track((namespace, name))
        if self.autoscaler is not None:
            if previous is None or previous.job is None:
                self.autoscaler.on_add(job)
            else:
                self.autoscaler.on_update(job)
        await self._refresh_status((namespace, name))

    async def _ensure_children(self, known: _Known) -> bool:
        """Create the children; on an error, say so and try again after a back-off.

        A transient error (5xx, a webhook timeout, a quota refusal) keeps the state
        and only notes the retry in ``message``; a permanent one (an invalid object,
        a forbidden create) makes the job Failed — and the retries go on, so the job
        recovers once the cause is gone (the RBAC fixed, the webhook back).
        """
        job = known.job
        assert job is not None
        key = job_key(job)
        try:
            gate = await servers_gate(self.cluster, self.parser, job, running=not known.held)
            if not gate.open:
                await self._hold(known, gate.message)
                return False
            known.held = False
            await create_children(self.cluster, self.parser, job, gate.placement)
        except (ClusterError, ValueError) as error:
            attempt = self._child_retries.get(key, 0) + 1
            self._child_retries[key] = attempt
            delay = min(CHILD_RETRY_BASE_S * 2 ** (attempt - 1), CHILD_RETRY_MAX_S)
            permanent = not isinstance(error, ClusterError) or is_permanent(error)
            log.warning("children of %s/%s not created (%s; retry in %.0f s): %s",
                        *key, "permanent" if permanent else "transient", delay, error)
            if permanent:
                status = {"state": FAILED, "message": f"creating children: {error}"}
            else:
                status = {**known.status, "message": f"creating children, retrying: {error}"}
                status.setdefault("state", CREATED)
            await self._write_status(*key, known, status)
            self._retry_children(key, known, delay)
            return False
        self._child_retries.pop(key, None)
        return True

    async def _hold(self, known: _Known, message: str) -> None:
        """Kueue holds the job's master and pservers: no child runs, nothing is planned."""
        assert known.job is not None
        known.held = True
        if self.autoscaler is not None:
            self.autoscaler.on_del(known.job)
        await self._write_status(*job_key(known.job), known,
                                 {"state": CREATED, "message": message})

    async def _follow_queue(self, key: tuple[str, str]) -> None:
        """Under Kueue, at each refresh: a held job whose master and pservers are now
        admitted gets its children; a running one whose were evicted loses them."""
        known = self._known.get(key)
        if (known is None or known.job is None or key in self._child_retries
                or finished_state(known.status) is not None
                or not kueue_queued(self.cluster, known.job)):
            return
        if known.held:
            await self._resume(key, known)
            return
        gate = await servers_gate(self.cluster, self.parser, known.job, running=True)
        if not gate.open:
            await self._hold(known, gate.message)

    async def _resume(self, key: tuple[str, str], known: _Known) -> None:
        if await self._ensure_children(known):
            assert known.job is not None
            if self.trainers is not None:
                self.trainers.track(key)
            if self.autoscaler is not None:
                self.autoscaler.on_add(known.job)
            await self._refresh_status(key)

    def _retry_children(self, key: tuple[str, str], known: _Known, delay: float) -> None:
        async def retry() -> None:
            await asyncio.sleep(delay)
            if self._known.get(key) is not known:
                return  # edited or deleted meanwhile: that event reconciled it
            await self._resume(key, known)

        task = asyncio.get_running_loop().create_task(retry())
        self._retry_tasks.add(task)
        task.add_done_callback(self._retry_tasks.discard)

    async def _stop_servers(self, known: _Known) -> None:
        """Scale a finished job's master and pserver ReplicaSets to 0 (once; a failure
        is retried on the next status refresh)."""
        if not known.stopped and known.job is not None:
            known.stopped = await stop_servers(self.cluster, known.job)

    async def _refresh_status(self, key: tuple[str, str]) -> None:
        known = self._known.get(key)
        if known is None or known.job is None:
            return  # invalid jobs keep their Failed status until edited
        job = known.job
        if finished_state(known.status) is not None:
            await self._stop_servers(known)  # a finished status is final
            return
        if known.held:
            return  # its status says why Kueue holds it
        try:
            trainer = await self.cluster.get_trainer_job(job)
        except NotFoundError:
            return
        pods = await self.cluster.job_pods(job)
        desired = int(trainer["spec"].get("parallelism", 0))
        outcome = trainer_job_outcome(trainer, await self._last_trainer_failure(trainer, known))
        if outcome is not None:
            state, message = outcome
        elif trainer["spec"].get("suspend"):
            state, message = CREATED, f"{SUSPENDED_MESSAGE} (waiting for admission)"
            words = await queue_words(self.cluster, trainer)
            if words:
                message = f"{message}: {words}"
        elif pods.running > 0:
            state, message = RUNNING, f"{pods.running} of {desired} trainers running"
        else:
            state, message = CREATED, (
                f"waiting for trainers: {pods.pending} pending" if pods.pending
                else f"waiting for trainers: none pending yet ({desired} desired)"
            )
        record = self.trainers.record(key) if self.trainers is not None else None
        if outcome is None and record is not None and record.problem:
            message = f"{message}; {record.problem}"  # in the API server's words
        refused = ""
        if outcome is None:  # posted once as a Warning Event
            refused = known.children_warned = await children_refused(
                self.cluster, job, known.children_warned)
        if refused:  # trainers without their master or pservers do not train
            state, message = CREATED, f"{refused}; {message}"
        if known.unapplied:
            message = f"{message}; {known.unapplied}"
        status = {
            "state": state,
            "message": message,
            "trainers": {"desired": desired, "running": pods.running, "pending": pods.pending},
        }
        plan = plan_status(self.autoscaler, key)
        if plan is not None and outcome is None:
            status["plan"] = plan
        waiting = waiting_reason(desired, pods) if outcome is None else ""
        if waiting:
            status["waiting"] = waiting
        ended = self.health is not None and await fold_health(
            self.health, self.cluster, job, trainer, status, outcome is None, pods.running)
        if ended and self.autoscaler is not None:  # by its stall limit: no more rescales
            self.autoscaler.on_del(job)
        await self._write_status(*key, known, status)
        if outcome is not None and known.status == status:
            await self._stop_servers(known)

    async def _last_trainer_failure(self, trainer: Manifest, known: _Known) -> str:
        """The last failed trainer pod and its error, from clusters that keep it
        (`TrainerFailures`); asked once, when the trainer Job has failed."""
        failed = any(
            c.get("type") == "Failed" and c.get("status") == "True"
            for c in (trainer.get("status") or {}).get("conditions") or ()
        )
        if not failed or known.job is None:
            return ""
        record = self.trainers.record(job_key(known.job)) if self.trainers else None
        if record is not None and record.last_failure:
            return record.last_failure  # counted by this controller (a managed trainer Job)
        if not isinstance(self.cluster, TrainerFailures):
            return ""
        if known.last_trainer_failure is None:
            try:
                failure = await self.cluster.last_trainer_failure(known.job)
                known.last_trainer_failure = str(failure or "")
            except ClusterError as error:
                log.warning(
                    "last trainer failure of %s not read: %s", known.job.metadata.name, error
                )
                return ""
        return known.last_trainer_failure

    async def _write_status(
        self, namespace: str, name: str, known: _Known, status: dict[str, Any]
    ) -> None:
        if known.status == status:
            return
        try:
            await self.cluster.update_training_job_status(namespace, name, status)
        except NotFoundError:
            return  # deleted meanwhile; on_del follows
        known.status = status
