"""What the runtime needs from etcd, in one place.

    pserver: register(address) -> index with a lease; `lost` is set the moment
             the lease is gone; checkpoint metadata (no lease).
    master:  campaign(address) -> leadership; fenced writes (a transaction
             conditioned on our leader key's create revision: a deposed master
             cannot write); per-task keys; progress.
    trainer: the master's address and the pserver list, polled in a thread.

Key layout under /edl/<namespace>/<job>/ :
    pservers/desired        desired pserver count (no lease: configuration)
    pservers/<i>            host:port of pserver i (lease)
    master/leader           host:port of the leading master (lease)
    master/meta             queue meta JSON (fenced)
    master/tasks/<id>       one task record JSON each (fenced)
    master/progress         progress JSON for `edl status` (fenced)
    checkpoints/<i>         {path, crc, timestamp, version} of pserver i's shard

Interim note: this adapter talks to etcd through aetcd directly because the
shared `edl.coord` client had not landed when the runtime was written; its
surface (`Coord`) is small so it can delegate to `edl.coord` without touching
master, pserver or trainer code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

import aetcd
import aetcd.exceptions

from edl.runtime.config import RuntimeConfig

log = logging.getLogger("edl.coord")
ETCD_ERRORS = (aetcd.exceptions.ClientError, asyncio.TimeoutError, OSError)
MAX_TXN_OPS = 100  # etcd's default --max-txn-ops is 128


def job_prefix(config: RuntimeConfig) -> str:
    return f"/edl/{config.namespace}/{config.job_name}/"


def first_endpoint(endpoints: str) -> tuple[str, int]:
    """(host, port) of the first of comma-separated etcd URLs."""
    first = endpoints.split(",")[0].strip()
    if not first:
        raise ValueError("EDL_ETCD_ENDPOINTS: required")
    parsed = urlparse(first if "://" in first else f"http://{first}")
    if not parsed.hostname or not parsed.port:
        raise ValueError(f"EDL_ETCD_ENDPOINTS: not a host:port URL: {first!r}")
    return parsed.hostname, parsed.port


@dataclass
class Membership:
    """A lease-bound key we hold; `lost` is set as soon as the lease is gone."""

    key: str
    lease_id: int
    create_revision: int
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    keeper: asyncio.Task[None] | None = None


class Coord:
    """One process's etcd session."""

    def __init__(self, config: RuntimeConfig, client: aetcd.Client) -> None:
        self.config = config
        self.client = client
        self.prefix = job_prefix(config)
        self.ttl = config.lease_ttl

    @classmethod
    async def connect(cls, config: RuntimeConfig, timeout: float = 30.0) -> Coord:
        host, port = first_endpoint(config.etcd_endpoints)
        client = aetcd.Client(host=host, port=port, timeout=5)
        coord = cls(config, client)
        deadline = time.monotonic() + timeout
        while True:
            try:
                await client.connect()
                await client.get(b"/edl/ping")
                return coord
            except ETCD_ERRORS as error:
                if time.monotonic() > deadline:
                    raise ConnectionError(
                        f"etcd at {config.etcd_endpoints} unreachable: {error}"
                    ) from None
                await asyncio.sleep(0.3)

    def key(self, suffix: str) -> bytes:
        return (self.prefix + suffix).encode()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.close()

    # ---- plain keys ----
    async def get(self, suffix: str) -> bytes | None:
        result = await self.client.get(self.key(suffix))
        return None if result is None else result.value

    async def put(self, suffix: str, value: bytes) -> None:
        await self.client.put(self.key(suffix), value)

    async def get_prefix(self, suffix: str) -> dict[str, bytes]:
        out = {}
        for kv in await self.client.get_prefix(self.key(suffix)):
            out[kv.key.decode()[len(self.prefix) :]] = kv.value
        return out

    # ---- leases ----
    async def _claim(self, suffix: str, value: bytes) -> Membership | None:
        """Create `suffix` bound to a new lease if it does not exist."""
        lease = await self.client.lease(self.ttl)
        key = self.key(suffix)
        tx = self.client.transactions
        ok, _ = await self.client.transaction(
            compare=[tx.create(key) == 0], success=[tx.put(key, value, lease=lease.id)], failure=[]
        )
        if not ok:
            with contextlib.suppress(*ETCD_ERRORS):
                await self.client.revoke_lease(lease.id)
            return None
        got = await self.client.get(key)
        member = Membership(suffix, lease.id, got.create_revision if got else 0)
        member.keeper = asyncio.create_task(self._keep_alive(member))
        return member

    async def _keep_alive(self, member: Membership) -> None:
        """Refresh every ttl/3; signal `lost` when etcd says the lease is gone,
        or when we could not refresh for a whole TTL (partitioned)."""
        last_ok = time.monotonic()
        while not member.lost.is_set():
            await asyncio.sleep(self.ttl / 3)
            try:
                reply = await asyncio.wait_for(self.client.refresh_lease(member.lease_id), self.ttl)
                if reply is None or reply.TTL <= 0:
                    break
                last_ok = time.monotonic()
            except ETCD_ERRORS as error:
                log.warning("lease refresh failed: %s", error)
                if time.monotonic() - last_ok >= self.ttl:
                    break
        member.lost.set()

    async def release(self, member: Membership) -> None:
        """Revoke the lease so our keys vanish at once (clean shutdown)."""
        if member.keeper is not None:
            member.keeper.cancel()
        member.lost.set()
        with contextlib.suppress(*ETCD_ERRORS):
            await asyncio.wait_for(self.client.revoke_lease(member.lease_id), 2.0)

    # ---- pservers ----
    async def register_pserver(self, address: str, desired: int) -> tuple[int, Membership]:
        """Claim the lowest free index below the desired count (retry until one frees)."""
        tx = self.client.transactions
        desired_key = self.key("pservers/desired")
        await self.client.transaction(
            compare=[tx.create(desired_key) == 0],
            success=[tx.put(desired_key, str(desired).encode())], failure=[],
        )
        while True:
            try:
                raw = await self.get("pservers/desired")
                count = int(raw) if raw else desired
                for index in range(count):
                    member = await self._claim(f"pservers/{index}", address.encode())
                    if member is not None:
                        return index, member
            except ETCD_ERRORS as error:
                log.warning("register: etcd error %s; retrying", error)
            await asyncio.sleep(0.5)

    async def pservers(self) -> dict[int, str]:
        out = {}
        for key, value in (await self.get_prefix("pservers/")).items():
            tail = key.split("/", 1)[1]
            if tail.isdigit():
                out[int(tail)] = value.decode()
        return out

    # ---- master election ----
    async def campaign(self, address: str, poll: float = 0.3) -> Membership:
        """Block until we hold master/leader."""
        while True:
            try:
                member = await self._claim("master/leader", address.encode())
                if member is not None:
                    return member
            except ETCD_ERRORS as error:
                log.warning("campaign: etcd error %s; retrying", error)
            await asyncio.sleep(poll)

    async def fenced_put(self, leader: Membership, items: list[tuple[str, bytes]]) -> bool:
        """Write items only while our leader key is the one we created."""
        tx = self.client.transactions
        lkey = self.key(leader.key)
        for start in range(0, max(len(items), 1), MAX_TXN_OPS):
            batch = items[start : start + MAX_TXN_OPS]
            if not batch:
                break
            ok, _ = await self.client.transaction(
                compare=[tx.create(lkey) == leader.create_revision],
                success=[tx.put(self.key(k), v) for k, v in batch], failure=[],
            )
            if not ok:
                return False
        return True

    async def master_address(self) -> str | None:
        raw = await self.get("master/leader")
        return raw.decode() if raw else None


class EtcdResolver:
    """Trainer-side discovery: a thread polls etcd; lookups read a snapshot."""

    def __init__(self, config: RuntimeConfig, interval: float = 0.3) -> None:
        self.config = config
        self.interval = interval
        self._master: str | None = None
        self._pservers: dict[int, str] = {}
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="edl-discovery", daemon=True)

    @classmethod
    def start(cls, config: RuntimeConfig, timeout: float = 60.0) -> EtcdResolver:
        resolver = cls(config)
        resolver._thread.start()
        if not resolver._ready.wait(timeout):
            raise ConnectionError(f"etcd at {config.etcd_endpoints} unreachable for {timeout} s")
        if resolver._error is not None:
            raise ConnectionError(str(resolver._error))
        return resolver

    def master_address(self) -> str | None:
        return self._master

    def pserver_addresses(self) -> dict[int, str]:
        return self._pservers

    def progress(self) -> dict | None:
        return None

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        asyncio.run(self._poll())

    async def _poll(self) -> None:
        try:
            coord = await Coord.connect(self.config)
        except (ConnectionError, ValueError) as error:
            self._error = error
            self._ready.set()
            return
        try:
            while not self._stop.is_set():
                try:
                    self._master = await coord.master_address()
                    self._pservers = await coord.pservers()
                    self._ready.set()
                except ETCD_ERRORS as error:
                    log.debug("discovery: %s", error)
                await asyncio.sleep(self.interval)
        finally:
            await coord.close()


def dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
