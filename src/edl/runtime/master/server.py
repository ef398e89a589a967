"""The master's imperative shell: gRPC handlers around the pure TaskQueue.

Every RPC mutates the queue, then waits for a *group commit* that persists
every task it touched (one etcd transaction for many concurrent RPCs, fenced
by leadership) before it answers. So an answer a trainer saw is never lost by
a failover, and throughput stays high under persistence.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Protocol

import grpc

from edl.runtime.master.batch import TrainerBatch
from edl.runtime.master.queue import Kind, QueueMeta, TaskQueue, TaskRecord
from edl.runtime.proto import runtime_pb2 as pb
from edl.runtime.proto import runtime_pb2_grpc as pb_grpc

log = logging.getLogger("edl.master")


class LeadershipLost(RuntimeError):
    """A fenced write was refused: another master leads now."""


class MasterStore(Protocol):
    """What the master needs from etcd: per-task state under fenced writes."""

    async def load(self) -> tuple[QueueMeta | None, list[TaskRecord]]: ...

    async def save(self, meta: dict | None, records: list[dict]) -> None:
        """Persist plain copies (QueueMeta / TaskRecord .to_dict()) in fenced batches;
        raise LeadershipLost when fenced out."""
        ...

    async def publish_progress(self, progress: dict) -> dict | None:
        """Publish ``progress`` with the pservers' figures; return those (None: none)."""
        ...


class GroupCommit:
    """Batch the queue's dirty records of many concurrent RPCs into few writes."""

    def __init__(self, queue: TaskQueue, store: MasterStore, on_lost: Callable[[], None]) -> None:
        self.queue = queue
        self.store = store
        self.on_lost = on_lost
        self._waiters: list[asyncio.Future[None]] = []
        self._runner: asyncio.Task[None] | None = None
        self.writes = 0

    async def commit(self) -> None:
        if not self.queue.dirty and not self.queue.meta_dirty and self._runner is None:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        if self._runner is None:
            self._runner = asyncio.create_task(self._run())
        await future

    async def _run(self) -> None:
        try:
            while self._waiters:
                waiters, self._waiters = self._waiters, []
                q = self.queue
                records = [q.tasks[i].to_dict() for i in sorted(q.dirty)]  # detached copies
                meta = q.meta.to_dict() if q.meta_dirty else None
                q.dirty, q.meta_dirty = set(), False
                try:
                    if records or meta:
                        await self.store.save(meta, records)
                        self.writes += 1
                except Exception as error:
                    # not persisted: keep it dirty for the next commit, fail these RPCs
                    q.dirty.update(r["id"] for r in records)
                    q.meta_dirty = q.meta_dirty or meta is not None
                    for w in waiters + self._waiters:
                        if not w.done():
                            w.set_exception(LeadershipLost(str(error)))
                    self._waiters = []
                    if isinstance(error, LeadershipLost):
                        self.on_lost()
                    return
                for w in waiters:
                    if not w.done():
                        w.set_result(None)
        finally:
            self._runner = None


class MasterService(pb_grpc.MasterServicer):
    def __init__(
        self,
        queue: TaskQueue,
        store: MasterStore,
        on_lost: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        is_leader: Callable[[], bool] = lambda: True,
        batch: TrainerBatch | None = None,
    ) -> None:
        self.queue = queue
        self.batch = batch or TrainerBatch(0)
        self.store = store
        self.clock = clock
        self.is_leader = is_leader
        self.commits = GroupCommit(queue, store, on_lost)
        self._serving = True
        # this term's leader and where it resumed, published with the progress so a
        # watcher (`edl run`) can report a failover and the pass it resumed at
        self.term: dict[str, object] = {}
        self._publishing = asyncio.Lock()

    @property
    def serving(self) -> bool:
        """Only while we certainly lead (checked per request, not per term)."""
        return self._serving and self.is_leader()

    @serving.setter
    def serving(self, value: bool) -> None:
        self._serving = value

    async def _persist(self, context: grpc.aio.ServicerContext) -> None:
        if not self.serving:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "master is stepping down")
        try:
            await self.commits.commit()
        except LeadershipLost as error:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"state not persisted: {error}")

    async def SetDataset(
        self, request: pb.Dataset, context: grpc.aio.ServicerContext
    ) -> pb.DatasetReply:
        try:
            ok = self.queue.set_dataset(
                request.num_samples, request.chunk_size, request.chunks_per_task
            )
        except ValueError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"dataset: {error}")
        if not ok:
            m = self.queue.meta
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"dataset already set to {m.num_samples} samples, chunk {m.chunk_size} x "
                f"{m.chunks_per_task}",
            )
        await self._persist(context)
        return pb.DatasetReply(num_tasks=len(self.queue.tasks), passes=self.queue.meta.passes)

    async def GetTask(
        self, request: pb.TaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.TaskReply:
        d = self.queue.dispatch(request.trainer, self.clock())
        await self._persist(context)
        if d.kind is Kind.TASK and d.task is not None:
            t = d.task
            task = _task(t.id, t.epoch, d.current_pass, t.begin, t.end)
            task.batch_size = self.batch.per_trainer(self._alive(), t.end - t.begin)
            return pb.TaskReply(status=pb.TaskReply.TASK, task=task)
        status = {
            Kind.WAIT: pb.TaskReply.WAIT,
            Kind.DONE: pb.TaskReply.DONE,
            Kind.NO_DATASET: pb.TaskReply.NO_DATASET,
        }[d.kind]
        return pb.TaskReply(status=status)

    async def FinishTask(self, request: pb.TaskReport, context: grpc.aio.ServicerContext) -> pb.Ack:
        loss = request.loss if request.loss == request.loss else None  # NaN -> no loss
        ok = self.queue.finish(
            request.id, request.epoch, request.trainer, self.clock(), request.samples, loss
        )
        if ok:
            self.batch.finished_at(request.batch_size, request.samples, request.compute_seconds)
        await self._persist(context)
        return pb.Ack(accepted=ok)

    async def FailTask(self, request: pb.TaskReport, context: grpc.aio.ServicerContext) -> pb.Ack:
        ok = self.queue.fail(request.id, request.epoch, request.trainer, self.clock())
        if ok:
            log.warning("task %d failed on %s: %s", request.id, request.trainer, request.error)
        await self._persist(context)
        return pb.Ack(accepted=ok)

    async def ReturnTask(self, request: pb.TaskReport, context: grpc.aio.ServicerContext) -> pb.Ack:
        ok = self.queue.give_back(request.id, request.epoch, request.trainer, self.clock())
        await self._persist(context)
        return pb.Ack(accepted=ok)

    async def Leave(self, request: pb.Heartbeat, context: grpc.aio.ServicerContext) -> pb.Ack:
        returned = self.queue.forget_trainer(request.trainer, self.clock())
        log.info("trainer %s left; tasks back in the queue: %s", request.trainer, returned)
        await self._persist(context)
        return pb.Ack(accepted=True)

    async def Beat(self, request: pb.Heartbeat, context: grpc.aio.ServicerContext) -> pb.Ack:
        self.queue.beat(request.trainer, self.clock())
        return pb.Ack(accepted=True)

    async def Report(self, request: pb.Metrics, context: grpc.aio.ServicerContext) -> pb.Ack:
        # published before the answer: a trainer reports last and then exits, and a finished
        # job's master is stopped at once, so the next periodic publish may never come
        self.queue.record_metrics(request.trainer, dict(request.values), self.clock())
        try:
            await self.publish()
        except LeadershipLost as error:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"metrics not published: {error}")
        except Exception as error:  # etcd hiccup: the periodic publish carries them
            log.warning("metrics not published now: %s", error)
        return pb.Ack(accepted=True)

    async def publish(self) -> None:
        """Publish the progress as it is now; one at a time, so an older snapshot never
        lands after a newer one."""
        async with self._publishing:
            figures = await self.store.publish_progress({**self.progress(self.clock()),
                                                         **self.term})
            self.batch.follow(figures or {})

    async def GetProgress(
        self, request: pb.ProgressRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProgressReply:
        return pb.ProgressReply(json=json.dumps(self.progress(self.clock())))

    def progress(self, now: float) -> dict:
        """The queue's progress with the per-trainer batches (a batch-adapting job)."""
        return {**self.queue.progress(now), **self.batch.progress()}

    def _alive(self) -> int:
        return sum(not s.gone for s in self.queue.trainers.values())

    async def housekeeping(self, interval: float = 0.5, publish_every: float = 1.0) -> None:
        """Reap dead trainers and timed-out tasks; publish progress to etcd."""
        last_publish = 0.0
        while self.serving:
            await asyncio.sleep(interval)
            now = self.clock()
            lost, expired = self.queue.reap(now)
            if lost:
                log.info("trainers lost: %s", lost)
            if expired:
                log.info("tasks timed out: %s", expired)
            with contextlib.suppress(LeadershipLost):  # RPCs retry; lost leadership ends the term
                await self.commits.commit()
            if now - last_publish >= publish_every:
                last_publish = now
                try:
                    await self.publish()
                except LeadershipLost:
                    raise
                except Exception as error:  # etcd hiccup: keep serving, publish next time
                    log.warning("progress not published: %s", error)


def _task(task_id: int, epoch: int, current_pass: int, begin: int, end: int) -> pb.Task:
    task = pb.Task(id=task_id, epoch=epoch, begin=begin, end=end)
    setattr(task, "pass", current_pass)  # `pass` is a Python keyword
    return task
