"""EtcdClient: the original Go client's API (register, get_key, put_key, shutdown), async.

A pserver calls ``register(port)`` and serves only while ``lease_valid()``; when
``lease_lost`` fires it stops serving and may call ``register`` again (it then gets
the lowest free index, usually its old one).  Trainers use ``list_pservers`` and
``watch_pservers``; the master uses ``edl.coord.election.Election(client, ...)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable

from edl.coord import discovery, keys
from edl.coord.errors import (
    EtcdConfigError,
    EtcdUnavailableError,
    IndexUnavailableError,
    LeaseLostError,
    NotRegisteredError,
)
from edl.coord.lease import KeptLease
from edl.coord.transport import EtcdTransport, compare_create, compare_lease, op_get, op_put

log = logging.getLogger(__name__)

_RETRY_PAUSE = 0.2


class EtcdClient:
    """A job's connection to etcd: pserver registration, lease, keys, discovery.

    Args (the original's order): ``endpoints`` comma-separated URLs; ``num_pservers``
    the desired pserver count; ``dial_timeout`` seconds for one etcd request;
    ``ttl`` the lease TTL in seconds (etcd's minimum is 2 s by default).
    Keywords: ``prefix`` the job's key prefix (see ``edl.coord.keys``); ``host``
    the address published for this process (default ``$EDL_POD_IP`` or 127.0.0.1).
    """

    def __init__(
        self,
        endpoints: str,
        num_pservers: int,
        dial_timeout: float,
        ttl: int,
        *,
        prefix: str = keys.DEFAULT_PREFIX,
        host: str | None = None,
    ) -> None:
        problems = []
        if isinstance(num_pservers, bool) or not isinstance(num_pservers, int) or num_pservers < 0:
            problems.append(f"num_pservers must be an integer >= 0, got {num_pservers!r}")
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1:
            problems.append(f"ttl must be an integer number of seconds >= 1, got {ttl!r}")
        if not isinstance(dial_timeout, int | float) or dial_timeout <= 0:
            problems.append(f"dial_timeout must be > 0 seconds, got {dial_timeout!r}")
        if problems:
            raise EtcdConfigError("; ".join(problems))
        self.transport = EtcdTransport(endpoints)  # raises EndpointError
        self.num_pservers = num_pservers
        self.dial_timeout = float(dial_timeout)
        self.ttl = ttl
        self.prefix = keys.normalize_prefix(prefix)
        self.host = host or os.environ.get("EDL_POD_IP") or "127.0.0.1"
        self.index: int | None = None
        self.lease_lost = asyncio.Event()
        self._lease: KeptLease | None = None
        self._callbacks: list[Callable[[str], None]] = []
        self._registered_callbacks: list[Callable[[int], None]] = []
        self._register_lock = asyncio.Lock()
        self._keep_port: int | None = None
        self._reregister_task: asyncio.Task[None] | None = None
        self._stale_leases: list[int] = []
        self._closed = False

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- lease ---------------------------------------------------------------
    def lease_valid(self) -> bool:
        """True while this process's lease is certainly alive: guard every request with it."""
        return self._lease is not None and self._lease.valid()

    def is_registered(self) -> bool:
        """True while this process holds a pserver index under a certainly-alive lease.

        Stricter than ``lease_valid()``: false during a re-registration, between the
        new lease's grant and the claim of an index.
        """
        return self.index is not None and self.lease_valid()

    def on_lease_lost(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` (in the event loop) whenever the lease is lost."""
        self._callbacks.append(callback)

    async def wait_lease_lost(self) -> str:
        """Wait until the current lease is lost; returns the reason."""
        await self.lease_lost.wait()
        return self._lease.lost_reason if self._lease else "no lease"

    def on_registered(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(index)`` after every successful (re-)registration."""
        self._registered_callbacks.append(callback)

    def _lost(self, reason: str) -> None:
        self.index = None
        self.lease_lost.set()
        for callback in self._callbacks:
            try:
                callback(reason)
            except Exception:
                log.exception("lease-lost callback failed")
        if self._keep_port is not None and not self._closed:
            self._reregister_task = asyncio.get_running_loop().create_task(
                self._reregister(self._keep_port), name="etcd-reregister"
            )

    async def _reregister(self, port: int) -> None:
        try:
            await self.register(port, timeout=None, keep=True)
        except Exception:
            log.exception("re-registration failed")

    def _discard_lease(self) -> None:
        """Forget the current lease; it is revoked later (or expires on its own)."""
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.abandon()
            self._stale_leases.append(lease.id)

    async def _revoke_stale(self, timeout: float) -> None:
        """Revoke leases we gave up on, so their keys (e.g. an old index) vanish.

        Matters after an etcd restart: etcd revives leases then, so a lease we
        declared lost may still hold our old index.
        """
        while self._stale_leases:
            await self.transport.revoke(self._stale_leases[0], timeout)
            self._stale_leases.pop(0)

    async def _ensure_lease(self, timeout: float) -> KeptLease:
        if self._lease is not None and self._lease.valid():
            return self._lease
        self._discard_lease()
        await self._revoke_stale(timeout)
        self._lease = await KeptLease.grant(self.transport, self.ttl, timeout, [self._lost])
        self.lease_lost.clear()
        return self._lease

    # -- registration --------------------------------------------------------
    async def register(self, port: int, timeout: float | None = 60.0, *, keep: bool = False) -> int:
        """Claim the lowest free pserver index and publish ``host:port`` under it.

        Publishes the desired count first if absent (no lease: configuration must
        outlive any pserver).  Retries while etcd is unreachable or every index is
        taken, for up to ``timeout`` seconds (None: forever), then raises
        EtcdUnavailableError or IndexUnavailableError.  Returns the index; calling it
        again while registered returns the same index.  With ``keep=True`` the client
        registers again by itself after every lease loss (``on_registered`` reports
        the new index; ``lease_lost`` still fires first so the owner stops serving).
        """
        self._check_open()
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise EtcdConfigError(f"port must be 1-65535, got {port!r}")
        if keep:
            self._keep_port = port
        async with self._register_lock:
            if self.index is not None and self.lease_valid():
                return self.index
            problem = ["etcd did not answer"]
            try:
                async with asyncio.timeout(timeout):
                    index = await self._register_until_done(f"{self.host}:{port}", problem)
            except asyncio.CancelledError:
                self._discard_lease()  # a txn cut short may have claimed a key with it
                raise
            except TimeoutError:
                self._discard_lease()
                if problem[0].startswith("all "):
                    raise IndexUnavailableError(
                        f"register: {problem[0]} after {timeout} s"
                    ) from None
                raise EtcdUnavailableError(
                    f"register: gave up after {timeout} s: {problem[0]}"
                ) from None
            self.index = index
            log.info("registered pserver %d at %s:%d", index, self.host, port)
        for callback in self._registered_callbacks:
            try:
                callback(index)
            except Exception:
                log.exception("registered callback failed")
        return index

    async def _register_until_done(self, address: str, problem: list[str]) -> int:
        while True:
            try:
                index = await self._try_register(address)
            except (EtcdUnavailableError, LeaseLostError) as error:
                problem[0] = str(error)
            else:
                if index is not None:
                    return index
                problem[0] = f"all {self.num_pservers} pserver indices are taken"
            await asyncio.sleep(_RETRY_PAUSE)

    async def _try_register(self, address: str) -> int | None:
        desired = await self._publish_desired()
        lease = await self._ensure_lease(self.dial_timeout)
        while lease.valid():
            listing = await self.transport.range(
                keys.pservers_dir(self.prefix), self.dial_timeout, prefix=True
            )
            taken = {
                index
                for kv in listing.kvs
                if (index := keys.parse_pserver_key(self.prefix, kv.key)) is not None
            }
            index = keys.lowest_free_index(taken, desired)
            if index is None:
                return None
            key = keys.pserver_key(self.prefix, index)
            response = await self.transport.txn(
                [compare_create(key, 0)],
                [op_put(key, address.encode(), lease.id)],
                [],
                self.dial_timeout,
            )
            if response.succeeded:
                return index
            # another pserver took that index between our read and our txn: look again
        raise LeaseLostError("lease lost while registering")

    async def _publish_desired(self) -> int:
        """Put the desired count if absent (without lease); return the count in etcd."""
        key = keys.desired_pservers_key(self.prefix)
        response = await self.transport.txn(
            [compare_create(key, 0)],
            [op_put(key, str(self.num_pservers).encode())],
            [op_get(key)],
            self.dial_timeout,
        )
        if response.succeeded:
            return self.num_pservers
        stored = response.responses[0].response_range.kvs
        try:
            desired = int(stored[0].value)
        except (IndexError, ValueError):
            return self.num_pservers
        if desired != self.num_pservers:
            log.warning(
                "desired pserver count in etcd is %d, not %d; using etcd's",
                desired,
                self.num_pservers,
            )
        return desired

    # -- keys ----------------------------------------------------------------
    async def get_key(self, key: str, timeout: float | None = None) -> bytes:
        """The value of ``<prefix>/<key>``, or b"" when absent."""
        self._check_open()
        response = await self.transport.range(
            keys.under(self.prefix, key), timeout or self.dial_timeout
        )
        return bytes(response.kvs[0].value) if response.kvs else b""

    async def put_key(
        self, key: str, value: bytes, timeout: float | None = None, with_lease: bool = False
    ) -> None:
        """Put ``<prefix>/<key>``; ``with_lease`` binds it to this process's lease."""
        self._check_open()
        timeout = timeout or self.dial_timeout
        lease_id = (await self._ensure_lease(timeout)).id if with_lease else 0
        await self.transport.put(keys.under(self.prefix, key), bytes(value), timeout, lease_id)

    async def put_if_registered(
        self, key: str, value: bytes, timeout: float | None = None, *, index: int | None = None
    ) -> None:
        """Put ``<prefix>/<key>`` only while this client's pserver key carries its lease.

        One etcd txn: the put commits only if ``pservers/<index>`` is still bound to
        this client's lease, so a deposed pserver (lease expired, index re-claimed
        by a replacement) can never overwrite the replacement's data, however late
        its request arrives. ``index`` is the index the caller believes it holds
        (default: the current one). Raises NotRegisteredError otherwise.
        """
        lease, held = self._lease, self.index
        if index is None:
            index = held
        if self._closed or lease is None or held is None or index != held or not lease.valid():
            raise NotRegisteredError(f"put {key}: this process does not hold pserver {index}")
        response = await self.transport.txn(
            [compare_lease(keys.pserver_key(self.prefix, index), lease.id)],
            [op_put(keys.under(self.prefix, key), bytes(value))],
            [],
            timeout or self.dial_timeout,
        )
        if not response.succeeded:
            raise NotRegisteredError(
                f"put {key}: pserver {index} is no longer held by this process's lease"
            )

    # -- discovery -----------------------------------------------------------
    async def desired_pservers(self, timeout: float | None = None) -> int | None:
        """The desired pserver count stored in etcd (None before any pserver published it)."""
        return await discovery.desired_pservers(
            self.transport, self.prefix, timeout or self.dial_timeout
        )

    async def list_pservers(self, timeout: float | None = None) -> dict[int, str]:
        """Live pservers now: index -> ``host:port``."""
        snapshot = await discovery.list_pservers(
            self.transport, self.prefix, timeout or self.dial_timeout
        )
        return snapshot.pservers

    def watch_pservers(self) -> AsyncIterator[dict[int, str]]:
        """Yield the pserver map now and after every change (survives etcd restarts)."""
        return discovery.watch_pservers(self.transport, self.prefix, self.dial_timeout)

    # -- shutdown ------------------------------------------------------------
    async def shutdown(self) -> None:
        """Revoke the lease (its keys vanish at once) and close; calling twice is harmless."""
        if self._closed:
            return
        self._closed = True
        task, self._reregister_task = self._reregister_task, None
        if task is not None and task is not asyncio.current_task():
            # let a re-registration in flight unwind before its lease and channel go away
            task.cancel()
            await asyncio.wait([task], timeout=self.dial_timeout)
        lease, self._lease = self._lease, None
        self.index = None
        if lease is not None:
            await lease.revoke(self.dial_timeout)
        with contextlib.suppress(Exception):
            await self._revoke_stale(self.dial_timeout)
        with contextlib.suppress(Exception):
            await self.transport.close()

    def _check_open(self) -> None:
        if self._closed:
            raise LeaseLostError("EtcdClient was shut down")
