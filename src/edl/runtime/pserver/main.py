"""`edl pserver` as a process: register, restore, serve, checkpoint, repeat.

The index comes from the registration (lowest free below the desired count),
so a replacement takes exactly the index that died and restores its shard
from that index's checkpoint. The moment the lease is lost the shard stops
serving (a replacement may own the index now); the loop registers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from edl.coord import EtcdClient
from edl.coord.errors import CoordError, NotRegisteredError
from edl.runtime.config import RuntimeConfig
from edl.runtime.coordination import connect, dumps
from edl.runtime.gate import SERVER_OPTIONS, make_gate
from edl.runtime.master.main import until_stopped
from edl.runtime.proto import runtime_pb2_grpc as pb_grpc
from edl.runtime.pserver.aggregate import Aggregation
from edl.runtime.pserver.checkpoint import (
    CheckpointError,
    read_checkpoint,
    remove_other_checkpoints,
    write_checkpoint,
)
from edl.runtime.pserver.gradients import run_gradients
from edl.runtime.pserver.server import PServerService
from edl.runtime.pserver.shard import Shard
from edl.runtime.signals import stop_on_signals

log = logging.getLogger("edl.pserver")


HEALTH_KEY = "state/checkpoint-health/{index}"  # relative to the job's prefix


class Checkpointer:
    """Periodic + final checkpoints of one shard, metadata in etcd.

    Its health goes to ``state/checkpoint-health/<index>`` whenever it changes (a first
    failure, another error, a recovery) and after the final save: `edl run` shows a
    failing shard as a fault while it can still be fixed, and says at the end whether
    the last state was saved. Not under the lease: the record outlives the process."""

    def __init__(self, client: EtcdClient, shard: Shard, index: int, directory: Path) -> None:
        self.client = client
        self.shard = shard
        self.index = index
        self.directory = directory
        self.saved_version = -1
        self.saved: tuple[int, int] | None = None  # the shard's `changes` last saved
        self.saves = 0
        self.error = ""  # the last save's error ('' when it succeeded)
        self.failing_since: float | None = None
        self.saved_at: float | None = None

    async def attempt(self, final: bool = False) -> bool:
        """One save; its failure is logged and published, never raised."""
        try:
            await self.save()
        except Exception as error:  # keep serving; try again next interval
            what = "final checkpoint" if final else "checkpoint"
            log.error("pserver %d: %s failed: %s", self.index, what, error)
            changed = self.error != str(error)
            self.error = str(error) or type(error).__name__
            self.failing_since = self.failing_since or time.time()
            if changed or final:
                await self.publish(final)
            return False
        recovered = bool(self.error)
        self.error, self.failing_since = "", None
        if recovered or final:
            await self.publish(final)
        return True

    def health(self, final: bool = False) -> dict[str, Any]:
        return {"index": self.index, "ok": not self.error, "error": self.error,
                "failing_since": self.failing_since, "saved_version": self.saved_version,
                "saved_at": self.saved_at, "final": final, "at": time.time()}

    async def publish(self, final: bool = False) -> None:
        key = HEALTH_KEY.format(index=self.index)
        try:
            await self.client.put_key(key, dumps(self.health(final)))
        except Exception as error:  # the display misses it; the log has the error
            log.warning("pserver %d: checkpoint health not published: %s", self.index, error)

    async def restore(self) -> bool:
        """Load this index's checkpoint if any; False (start empty) when none or bad."""
        raw = await self.client.get_key(f"checkpoints/{self.index}")
        if not raw:
            return False
        meta = json.loads(raw)
        try:
            snap = await asyncio.to_thread(read_checkpoint, Path(meta["path"]), int(meta["crc"]))
        except CheckpointError as error:
            log.error("pserver %d: %s; starting uninitialised", self.index, error)
            return False
        self.shard.restore(snap)
        self.saved_version = snap.version
        self.saved = self.shard.changes
        log.info("pserver %d restored version %d from %s", self.index, snap.version, meta["path"])
        return True

    async def save(self) -> bool:
        """temp + fsync + rename, then metadata, then delete the index's other files."""
        if not self.shard.initialized or self.shard.changes == self.saved:
            return False
        if not self.client.lease_valid():
            return False
        changes = self.shard.changes
        snap = await asyncio.to_thread(self.shard.snapshot)
        path, crc = await asyncio.to_thread(write_checkpoint, self.directory, self.index, snap)
        old = await self.client.get_key(f"checkpoints/{self.index}")
        if not self.client.lease_valid():  # a replacement may own the index: leave its metadata
            path.unlink(missing_ok=True)
            return False
        meta = {"path": str(path), "crc": crc, "timestamp": time.time(), "version": snap.version}
        try:  # fenced: only while our lease still holds this index
            await self.client.put_if_registered(
                f"checkpoints/{self.index}", dumps(meta), index=self.index
            )
        except NotRegisteredError as error:
            log.warning("pserver %d: checkpoint metadata not written: %s", self.index, error)
            path.unlink(missing_ok=True)
            return False
        if old:  # the previous record, wherever it was written
            old_path = json.loads(old).get("path")
            if old_path and old_path != str(path):
                with contextlib.suppress(OSError):
                    os.unlink(old_path)
        await asyncio.to_thread(remove_other_checkpoints, self.directory, self.index, path)
        self.saved_version = snap.version
        self.saved = changes
        self.saved_at = time.time()
        self.saves += 1
        return True

    async def run(self, interval: float) -> None:
        while self.client.lease_valid():
            await asyncio.sleep(interval)
            await self.attempt()


async def serve(config: RuntimeConfig, stop: asyncio.Event | None = None) -> None:
    stop = stop_on_signals(stop)
    client = await connect(config)
    gate = make_gate("PServer", sync=True)
    server = grpc.server(ThreadPoolExecutor(max_workers=8), options=SERVER_OPTIONS)
    pb_grpc.add_PServerServicer_to_server(gate, server)
    port = server.add_insecure_port(f"{config.pod_ip}:{config.port}")
    server.start()
    directory = Path(config.checkpoint_path)
    try:
        while not stop.is_set():
            index = await until_stopped(client.register(port, timeout=None), stop)
            if index is None:
                break
            try:
                await serve_shard(client, gate, index, port, directory, config, stop)
            except CoordError as error:
                log.warning("pserver %d: etcd error %s; registering again", index, error)
    finally:
        gate.current = None
        server.stop(0.5)
        await client.shutdown()  # revokes the lease: our index frees at once


async def serve_shard(
    client: EtcdClient,
    gate: Any,  # make_gate's servicer: `.current` is the shard being served
    index: int,
    port: int,
    directory: Path,
    config: RuntimeConfig,
    stop: asyncio.Event,
) -> None:
    """One registration term: restore, serve and checkpoint until the lease or we stop."""
    shard = Shard()
    if config.batch_initial > 0:  # spec.batch: pushes are summed into the job's batch
        shard.aggregation = Aggregation(config.batch_initial, flush_after=config.batch_flush)
    ckpt = Checkpointer(client, shard, index, directory)
    await ckpt.restore()
    service = PServerService(shard, index, client.lease_valid)  # thread-safe
    gate.current = service
    # only now: `edl run`'s events read this line as "restored (or not), serving"
    log.info("pserver %d serving on %s:%d", index, client.host, port)
    helpers = [asyncio.create_task(ckpt.run(config.checkpoint_interval))]
    if shard.aggregation is not None:
        helpers.append(asyncio.create_task(run_gradients(
            client, shard, index, config.namespace, config.job_name, config.batch_initial)))
    waiters = [asyncio.create_task(e.wait()) for e in (client.lease_lost, stop)]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        service.serving = False  # first: never serve a shard we may no longer own
        gate.current = None
        for t in (*helpers, *waiters):
            t.cancel()
    if client.lease_lost.is_set():
        log.warning("pserver %d lost its lease; stopped serving", index)
    elif stop.is_set():
        await ckpt.attempt(final=True)  # final checkpoint at shutdown
