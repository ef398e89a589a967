"""What the runtime needs from etcd, on top of `edl.coord` (the shared client).

    pserver: `EtcdClient.register(port)` -> index; `lease_lost` fires the moment
             the lease is gone and `lease_valid()` guards every request.
    master:  `Election.campaign()`; job state through `FencedStore` (a write
             from a deposed master is refused by etcd itself).
    trainer: `EtcdResolver` — watches the leader key and the pserver list in a
             background thread; lookups read the latest snapshot.

Runtime keys under the job prefix /edl/<namespace>/<job> (see edl.coord.keys):
    state/master/meta        queue meta JSON (fenced)
    state/master/tasks/<id>  one task record JSON each (fenced; never one big value)
    state/master/progress    progress JSON for `edl status` and the live display (fenced)
    state/gradients/<i>      a batch-adapting job's pserver i: its shard's |G|², variance,
                             batch and counters (fenced on holding index i), summed by the
                             master into its progress
    checkpoints/<i>          {path, crc, timestamp, version} of pserver i's last checkpoint
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time

from edl.coord import EtcdClient, job_prefix, leader_address
from edl.coord.election import watch_leader
from edl.coord.errors import CoordError, EtcdUnavailableError
from edl.runtime.config import RuntimeConfig

log = logging.getLogger("edl.coord")
DIAL_TIMEOUT = 5.0
PROGRESS_KEY = "master/progress"  # relative to <prefix>/state/
GRADIENTS = "gradients/"  # relative to <prefix>/state/: one record per pserver index


def make_client(config: RuntimeConfig) -> EtcdClient:
    return EtcdClient(
        config.etcd_endpoints,
        config.pservers,
        DIAL_TIMEOUT,
        config.lease_ttl,
        prefix=job_prefix(config.namespace, config.job_name),
        host=config.pod_ip,
    )


async def connect(config: RuntimeConfig, timeout: float = 60.0) -> EtcdClient:
    """An EtcdClient that has answered once (waits for etcd to come up)."""
    client = make_client(config)
    deadline = time.monotonic() + timeout
    while True:
        try:
            await client.get_key("ping")
            return client
        except EtcdUnavailableError as error:
            if time.monotonic() > deadline:
                await client.shutdown()
                raise ConnectionError(
                    f"EDL_ETCD_ENDPOINTS: etcd at {config.etcd_endpoints} unreachable: {error}"
                ) from None
            await asyncio.sleep(0.3)


async def read_state(client: EtcdClient, sub: str = "") -> dict[str, bytes]:
    """Every key under <prefix>/state/<sub> (names relative to state/); no lock needed."""
    base = f"{client.prefix}/state/"
    response = await client.transport.range((base + sub).encode(), client.dial_timeout, prefix=True)
    return {bytes(kv.key).decode()[len(base) :]: bytes(kv.value) for kv in response.kvs}


async def read_progress(config: RuntimeConfig) -> dict | None:
    """The master's last published progress (for `edl status`), or None."""
    client = make_client(config)
    try:
        raw = (await read_state(client, PROGRESS_KEY)).get(PROGRESS_KEY)
    finally:
        await client.shutdown()
    return json.loads(raw) if raw else None


def dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class EtcdResolver:
    """Trainer-side discovery: watches in a thread; lookups read a snapshot."""

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self._master: str | None = None
        self._pservers: dict[int, str] = {}
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="edl-discovery", daemon=True)

    @classmethod
    def start(cls, config: RuntimeConfig, timeout: float = 60.0) -> EtcdResolver:
        resolver = cls(config)
        resolver._thread.start()
        if not resolver._ready.wait(timeout + 5):
            raise ConnectionError(f"etcd at {config.etcd_endpoints} unreachable for {timeout} s")
        if resolver._error is not None:
            raise ConnectionError(str(resolver._error))
        return resolver

    def master_address(self) -> str | None:
        return self._master

    def pserver_addresses(self) -> dict[int, str]:
        return self._pservers

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        try:
            client = await connect(self.config)
            self._master = await leader_address(client)
            self._pservers = await client.list_pservers()
        except (ConnectionError, CoordError, ValueError) as error:
            self._error = error
            self._ready.set()
            return
        self._ready.set()
        tasks = [
            asyncio.create_task(self._follow_master(client)),
            asyncio.create_task(self._follow_pservers(client)),
        ]
        try:
            await self._stopped.wait()
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(Exception):
                await client.shutdown()

    async def _follow_master(self, client: EtcdClient) -> None:
        while True:
            with contextlib.suppress(CoordError):
                async for address in watch_leader(client):
                    self._master = address
            await asyncio.sleep(0.2)

    async def _follow_pservers(self, client: EtcdClient) -> None:
        while True:
            with contextlib.suppress(CoordError):
                async for pservers in client.watch_pservers():
                    self._pservers = dict(pservers)
            await asyncio.sleep(0.2)
