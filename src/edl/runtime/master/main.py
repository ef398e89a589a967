"""`edl master` as a process: win the election, restore, serve, repeat.

The gRPC socket is bound first (its address is what the election publishes);
the task queue behind it is served only while we lead. Losing the leader
lease stops serving at once; the loop then campaigns again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal

import grpc

from edl.runtime.config import RuntimeConfig
from edl.runtime.coordination import Coord, Membership, dumps
from edl.runtime.gate import SERVER_OPTIONS, make_gate
from edl.runtime.master.queue import QueueMeta, TaskQueue, TaskRecord, TimeoutPolicy
from edl.runtime.master.server import LeadershipLost, MasterService
from edl.runtime.proto import runtime_pb2_grpc as pb_grpc

log = logging.getLogger("edl.master")
METHODS = [
    "SetDataset", "GetTask", "FinishTask", "FailTask", "ReturnTask", "Beat", "Report",
    "GetProgress",
]  # fmt: skip


class EtcdMasterStore:
    """Per-task keys in etcd, every write fenced by our leadership."""

    def __init__(self, coord: Coord, leader: Membership) -> None:
        self.coord = coord
        self.leader = leader

    async def load(self) -> tuple[QueueMeta | None, list[TaskRecord]]:
        raw = await self.coord.get_prefix("master/")
        meta = QueueMeta.from_dict(json.loads(raw["master/meta"])) if "master/meta" in raw else None
        records = [
            TaskRecord.from_dict(json.loads(v))
            for k, v in raw.items()
            if k.startswith("master/tasks/")
        ]
        return meta, records

    async def save(self, meta: QueueMeta | None, records: list[TaskRecord]) -> None:
        items = [(f"master/tasks/{r.id:07d}", dumps(r.to_dict())) for r in records]
        if meta is not None:
            items.append(("master/meta", dumps(meta.to_dict())))
        if self.leader.lost.is_set() or not await self.coord.fenced_put(self.leader, items):
            raise LeadershipLost("fenced write refused: another master leads")

    async def publish_progress(self, progress: dict) -> None:
        if not await self.coord.fenced_put(self.leader, [("master/progress", dumps(progress))]):
            raise LeadershipLost("fenced write refused: another master leads")


def new_queue(config: RuntimeConfig, meta: QueueMeta | None, records: list[TaskRecord],
              now: float) -> TaskQueue:
    kwargs = {
        "timeout": TimeoutPolicy(floor=config.task_timeout_floor),
        "trainer_ttl": config.trainer_ttl,
    }
    if meta is None or not records:
        return TaskQueue(passes=config.passes, **kwargs)  # type: ignore[arg-type]
    return TaskQueue.restore(meta, records, now, **kwargs)


async def serve(config: RuntimeConfig, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    coord = await Coord.connect(config)
    gate = make_gate(pb_grpc.MasterServicer, METHODS, "master")
    server = grpc.aio.server(options=SERVER_OPTIONS)
    pb_grpc.add_MasterServicer_to_server(gate, server)
    port = server.add_insecure_port(f"{config.pod_ip}:{config.port}")
    await server.start()
    address = f"{config.pod_ip}:{port}"
    log.info("master listening on %s", address)
    try:
        while not stop.is_set():
            leader = await _first(coord.campaign(address), stop)
            if leader is None:
                break
            await _lead(config, coord, gate, leader, stop)
    finally:
        gate.current = None
        await server.stop(0.5)
        await coord.close()


async def _lead(config: RuntimeConfig, coord: Coord, gate, leader: Membership,
                stop: asyncio.Event) -> None:
    store = EtcdMasterStore(coord, leader)
    meta, records = await store.load()
    queue = new_queue(config, meta, records, asyncio.get_running_loop().time())
    lost = asyncio.Event()
    service = MasterService(queue, store, on_lost=lost.set, clock=asyncio.get_running_loop().time)
    gate.current = service
    log.info(
        "leading (pass %d, %d tasks restored)", queue.meta.current_pass, len(queue.tasks)
    )
    keeper = asyncio.create_task(service.housekeeping())
    waiters = [asyncio.create_task(e.wait()) for e in (leader.lost, lost, stop)]
    try:
        await asyncio.wait([keeper, *waiters], return_when=asyncio.FIRST_COMPLETED)
    finally:
        service.serving = False
        gate.current = None
        for t in (keeper, *waiters):
            t.cancel()
        with contextlib.suppress(BaseException):
            await keeper
        if stop.is_set():
            await coord.release(leader)
        else:
            log.warning("lost leadership; campaigning again")
            await coord.release(leader)


async def _first(coro, stop: asyncio.Event):
    """Run coro unless stop fires first (then cancel it and return None)."""
    task = asyncio.ensure_future(coro)
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    return None
