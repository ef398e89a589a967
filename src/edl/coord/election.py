"""Master leader election with fencing.

The lock is one key, ``<prefix>/master/leader``, created in a txn only when absent
and bound to the candidate's lease; its value is the leader's address, so the
lock *is* the published address trainers watch.  Followers wait on a watch for
the key's deletion (the old leader's lease expired or was revoked) and then race
for it again, so failover takes about TTL plus etcd's expiry check (~0.5 s).

Fencing: every write the leader makes (``FencedStore``) is a txn conditioned on
the lock key still having the create_revision this leader created it with.  A
deposed leader — frozen, partitioned, or just slow — gets ``NotLeaderError``
from etcd itself, so it can never overwrite its successor's state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from edl.coord import keys
from edl.coord.backoff import Backoff
from edl.coord.client import EtcdClient
from edl.coord.errors import EtcdRequestError, EtcdUnavailableError, NotLeaderError
from edl.coord.follow import follow
from edl.coord.lease import KeptLease
from edl.coord.transport import compare_create, op_delete, op_get, op_put

log = logging.getLogger(__name__)

# etcd's default --max-txn-ops is 128; one slot is spent on nothing, keep a margin.
MAX_OPS_PER_TXN = 120


class Election:
    """Campaign for leadership of a job (``name`` picks the lock, default "master")."""

    def __init__(self, client: EtcdClient, address: str, *, name: str = "master") -> None:
        self.client = client
        self.transport = client.transport
        self.address = address
        self.key = keys.leader_key(client.prefix, name)
        self.lost = asyncio.Event()
        self._lease: KeptLease | None = None
        self._revision = 0  # create_revision of our lock key while leader

    # -- state ---------------------------------------------------------------
    def is_leader(self) -> bool:
        """True while we hold the lock and our lease is certainly alive."""
        return self._revision != 0 and self._lease is not None and self._lease.valid()

    @property
    def revision(self) -> int:
        """The lock's create_revision: a fencing token that grows with every new leader."""
        return self._revision

    @property
    def store(self) -> FencedStore:
        """Fenced writes for this leader (usable only after ``campaign``)."""
        return FencedStore(self)

    def _on_lease_lost(self, reason: str) -> None:
        log.warning("leadership of %s lost: %s", self.key.decode(), reason)
        self.lost.set()

    def _deposed(self, reason: str) -> None:
        """etcd says another leader holds the lock: stop renewing, signal ``lost``."""
        log.warning("deposed as leader of %s: %s", self.key.decode(), reason)
        self._revision = 0
        if self._lease is not None:
            self._lease.abandon()
        self.lost.set()

    # -- campaign ------------------------------------------------------------
    async def campaign(self, timeout: float | None = None) -> int:
        """Block until this process is the leader; returns the fencing revision.

        Raises TimeoutError after ``timeout`` seconds (None: wait forever).  A
        campaign that times out, fails or is cancelled revokes its lease, so it
        neither holds the lock nor keeps a lease alive for nothing.
        """
        try:
            async with asyncio.timeout(timeout):
                return await self._campaign_until_elected()
        except TimeoutError:
            await self.resign()
            raise TimeoutError(
                f"not elected leader of {self.key.decode()} within {timeout} s"
            ) from None
        except BaseException:
            await asyncio.shield(self.resign())
            raise

    async def _campaign_until_elected(self) -> int:
        backoff = Backoff()
        while True:
            try:
                if await self._try_acquire():
                    return self._revision
                backoff.succeeded()
                await self._wait_for_vacancy()
            except (EtcdUnavailableError, EtcdRequestError) as error:
                pause, loud = backoff.failed()
                if loud:
                    log.info("campaign for %s: %s; retrying (failure %d, next in %.1f s)",
                             self.key.decode(), error, backoff.failures, pause)
                await asyncio.sleep(pause)

    async def _try_acquire(self) -> bool:
        timeout = self.client.dial_timeout
        if self._lease is None or not self._lease.valid():
            if self._lease is not None:
                # etcd revives leases when it restarts: free a lock we may still hold
                await self._lease.revoke(timeout)
            self._lease = await KeptLease.grant(
                self.transport, self.client.ttl, timeout, [self._on_lease_lost]
            )
            self.lost.clear()
        response = await self.transport.txn(
            [compare_create(self.key, 0)],
            [op_put(self.key, self.address.encode(), self._lease.id), op_get(self.key)],
            [op_get(self.key)],
            timeout,
        )
        kvs = response.responses[-1].response_range.kvs
        if response.succeeded and kvs:
            self._revision = int(kvs[0].create_revision)
            log.info("elected leader of %s (revision %d)", self.key.decode(), self._revision)
            return True
        if kvs and int(kvs[0].lease) == self._lease.id:  # ours already (e.g. retried txn)
            self._revision = int(kvs[0].create_revision)
            return True
        return False

    async def _wait_for_vacancy(self) -> None:
        """Wait until the lock key is deleted (the leader's lease ended)."""
        current = await self.transport.range(self.key, self.client.dial_timeout)
        if not current.kvs:
            return
        start = int(current.header.revision) + 1
        async for _revision, events in self.transport.watch(self.key, start):
            if any(event.type == event.DELETE for event in events):
                return

    async def resign(self) -> None:
        """Give up leadership at once (revoke the lease, so the lock key vanishes)."""
        lease, self._lease = self._lease, None
        self._revision = 0
        if lease is not None:
            await lease.revoke(self.client.dial_timeout)

    # -- observers -----------------------------------------------------------
    async def leader(self, timeout: float | None = None) -> str | None:
        """The current leader's address, or None when there is none."""
        return await leader_address(self.client, timeout, key=self.key)

    def check(self) -> None:
        """Raise NotLeaderError unless we are certainly the leader (local check only)."""
        if not self.is_leader():
            raise NotLeaderError(f"not the leader of {self.key.decode()}")


async def leader_address(
    client: EtcdClient, timeout: float | None = None, *, key: bytes | None = None
) -> str | None:
    """Who leads the job now (trainers use this to find the master)."""
    key = key or keys.leader_key(client.prefix)
    response = await client.transport.range(key, timeout or client.dial_timeout)
    return bytes(response.kvs[0].value).decode() if response.kvs else None


def watch_leader(client: EtcdClient, *, name: str = "master") -> AsyncIterator[str | None]:
    """Yield the leader's address now and whenever it changes (None: no leader)."""

    def read(response: Any) -> str | None:
        return bytes(response.kvs[0].value).decode() if response.kvs else None

    def fold(current: str | None, events: list[Any]) -> str | None:
        for event in events:
            current = None if event.type == event.DELETE else bytes(event.kv.value).decode()
        return current

    return follow(
        client.transport,
        keys.leader_key(client.prefix, name),
        prefix=False,
        timeout=client.dial_timeout,
        read=read,
        fold=fold,
    )


class FencedStore:
    """Job state the leader writes: every txn holds only while this leader holds the lock.

    Keys are relative to ``<prefix>/state/``.  ``commit`` applies many puts and
    deletes in one txn (chunks of MAX_OPS_PER_TXN, each fenced on its own).
    """

    def __init__(self, election: Election) -> None:
        self.election = election
        self.client = election.client
        self._base = f"{self.client.prefix}/state"

    def _key(self, key: str) -> bytes:
        return keys.under(self._base, key)

    async def put(self, key: str, value: bytes) -> None:
        await self.commit(puts={key: value})

    async def delete(self, key: str) -> None:
        await self.commit(deletes=[key])

    async def commit(
        self, puts: Mapping[str, bytes] | None = None, deletes: Iterable[str] = ()
    ) -> None:
        """Write ``puts`` and ``deletes`` fenced on leadership; NotLeaderError if deposed."""
        ops = [op_put(self._key(k), bytes(v)) for k, v in (puts or {}).items()]
        ops += [op_delete(self._key(k)) for k in deletes]
        for start in range(0, max(len(ops), 1), MAX_OPS_PER_TXN):
            await self._fenced(ops[start : start + MAX_OPS_PER_TXN])

    async def _fenced(self, ops: list) -> None:
        election = self.election
        election.check()
        revision = election.revision
        response = await election.transport.txn(
            [compare_create(election.key, revision)], ops, [], self.client.dial_timeout
        )
        if not response.succeeded:
            election._deposed(f"a fenced write was rejected at revision {revision}")
            raise NotLeaderError(
                f"fenced write rejected: {election.key.decode()} is no longer the lock "
                f"created at revision {revision} (this leader was deposed)"
            )

    async def get(self, key: str) -> bytes | None:
        response = await self.client.transport.range(self._key(key), self.client.dial_timeout)
        return bytes(response.kvs[0].value) if response.kvs else None

    async def get_prefix(self, prefix: str = "") -> dict[str, bytes]:
        """Every state key under ``prefix`` (relative names) -> value; readers need no lock."""
        base = f"{self._base}/{prefix.lstrip('/')}"
        response = await self.client.transport.range(
            base.encode(), self.client.dial_timeout, prefix=True
        )
        cut = len(self._base) + 1
        return {bytes(kv.key).decode()[cut:]: bytes(kv.value) for kv in response.kvs}
