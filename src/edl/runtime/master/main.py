"""`edl master` as a process: win the election, restore, serve, repeat.

The gRPC socket is bound first (its address is what the election publishes);
the task queue behind it is served only while we lead (checked per request).
Losing the leader lease stops serving at once; the loop then campaigns again
and restores from etcd, so nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

import grpc

from edl.coord import Election, FencedStore
from edl.coord.errors import CoordError, NotLeaderError
from edl.runtime.config import RuntimeConfig
from edl.runtime.coordination import GRADIENTS, PROGRESS_KEY, connect, dumps
from edl.runtime.gate import SERVER_OPTIONS, make_gate
from edl.runtime.master.batch import TrainerBatch
from edl.runtime.master.queue import QueueMeta, TaskQueue, TaskRecord, TimeoutPolicy
from edl.runtime.master.server import LeadershipLost, MasterService
from edl.runtime.proto import runtime_pb2_grpc as pb_grpc
from edl.runtime.signals import stop_on_signals
from edl.throughput.shards import combine_shards, parse_records

log = logging.getLogger("edl.master")
T = TypeVar("T")


class EtcdMasterStore:
    """Per-task keys in etcd (state/master/...), every write fenced by our leadership."""

    def __init__(self, store: FencedStore) -> None:
        self.store = store

    async def load(self) -> tuple[QueueMeta | None, list[TaskRecord]]:
        raw = await self.store.get_prefix("master/")
        meta = QueueMeta.from_dict(json.loads(raw["master/meta"])) if "master/meta" in raw else None
        records = [
            TaskRecord.from_dict(json.loads(v))
            for k, v in raw.items()
            if k.startswith("master/tasks/")
        ]
        return meta, records

    async def save(self, meta: dict | None, records: list[dict]) -> None:
        puts = {f"master/tasks/{r['id']:07d}": dumps(r) for r in records}
        if meta is not None:
            puts["master/meta"] = dumps(meta)
        await self._commit(puts)

    async def publish_progress(self, progress: dict) -> dict | None:
        """The queue's progress, with a batch-adapting job's batch, φ, efficiency and gain
        summed over its pservers' shards (`edl.throughput.shards`), which it returns."""
        shards = await self.store.get_prefix(GRADIENTS)
        figures = combine_shards(parse_records(shards.values())) if shards else None
        await self._commit({PROGRESS_KEY: dumps({**progress, **(figures or {})})})
        return figures

    async def _commit(self, puts: dict[str, bytes]) -> None:
        try:
            await self.store.commit(puts=puts)
        except NotLeaderError as error:
            raise LeadershipLost(str(error)) from None


def new_queue(
    config: RuntimeConfig, meta: QueueMeta | None, records: list[TaskRecord], now: float
) -> TaskQueue:
    kwargs = {
        "timeout": TimeoutPolicy(floor=config.task_timeout_floor),
        "trainer_ttl": config.trainer_ttl,
    }
    if meta is None or not records:
        return TaskQueue(passes=config.passes, timeout=TimeoutPolicy(
            floor=config.task_timeout_floor), trainer_ttl=config.trainer_ttl)
    return TaskQueue.restore(meta, records, now, **kwargs)


async def serve(config: RuntimeConfig, stop: asyncio.Event | None = None) -> None:
    stop = stop_on_signals(stop)
    client = await connect(config)
    gate = make_gate("Master")
    server = grpc.aio.server(options=SERVER_OPTIONS)
    pb_grpc.add_MasterServicer_to_server(gate, server)
    port = server.add_insecure_port(f"{config.pod_ip}:{config.port}")
    await server.start()
    address = f"{config.pod_ip}:{port}"
    log.info("master listening on %s", address)
    try:
        while not stop.is_set():
            election = Election(client, address)
            if await until_stopped(election.campaign(), stop) is None:
                break
            try:
                await lead(config, election, gate, stop)
            except CoordError as error:
                log.warning("term ended by etcd error: %s", error)
            finally:
                gate.current = None
                with contextlib.suppress(Exception):
                    await election.resign()
    finally:
        gate.current = None
        await server.stop(0.5)
        await client.shutdown()


async def lead(config: RuntimeConfig, election: Election, gate: Any,
               stop: asyncio.Event) -> None:
    store = EtcdMasterStore(election.store)
    meta, records = await store.load()
    loop = asyncio.get_running_loop()
    queue = new_queue(config, meta, records, loop.time())
    lost = asyncio.Event()
    service = MasterService(
        queue, store, on_lost=lost.set, clock=loop.time, is_leader=election.is_leader,
        batch=TrainerBatch(config.batch_initial),
    )
    service.term = {
        "leader": election.address,
        "resumed_pass": queue.meta.current_pass,
        "resumed_done": queue.counts()["done"],
    }
    gate.current = service
    log.info("leading (pass %d, %d tasks restored)", queue.meta.current_pass, len(queue.tasks))
    keeper = asyncio.create_task(service.housekeeping())
    waiters = [asyncio.create_task(e.wait()) for e in (election.lost, lost, stop)]
    try:
        await asyncio.wait([keeper, *waiters], return_when=asyncio.FIRST_COMPLETED)
    finally:
        service.serving = False
        gate.current = None
        for t in (keeper, *waiters):
            t.cancel()
        with contextlib.suppress(BaseException):
            await keeper
        if not stop.is_set():
            log.warning("lost leadership; campaigning again")


async def until_stopped(work: Awaitable[T], stop: asyncio.Event) -> T | None:
    """Await `work` unless `stop` fires first (then cancel it and return None)."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    return None
