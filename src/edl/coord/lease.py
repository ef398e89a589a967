"""A lease kept alive in the background, with a local deadline and loss signalling.

Why a local deadline: a process that was partitioned or frozen (SIGSTOP) cannot
learn from etcd that its lease expired before it serves again.  So the lease is
trusted only until ``(send time of the last successful renewal) + TTL`` on the
monotonic clock — never longer than etcd itself keeps it — and ``valid()`` is
what request handlers check before serving.  Once lost, a lease stays lost: the
owner must stop serving and may register again with a new lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from edl.coord.errors import EtcdConfigError, EtcdRequestError, EtcdUnavailableError
from edl.coord.transport import EtcdTransport

log = logging.getLogger(__name__)

LostCallback = Callable[[str], None]


class KeptLease:
    """One etcd lease, renewed every TTL/3 until revoked or lost."""

    def __init__(
        self,
        transport: EtcdTransport,
        lease_id: int,
        ttl: int,
        granted_at: float,
        on_lost: list[LostCallback] | None = None,
    ) -> None:
        self.transport = transport
        self.id = lease_id
        self.ttl = ttl
        self.deadline = granted_at + ttl
        self.lost = asyncio.Event()
        self.lost_reason = ""
        self._lost_flag = False
        self._loop = asyncio.get_running_loop()
        self._callbacks: list[LostCallback] = list(on_lost or [])
        self._closed = False
        self._revoked = False
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def grant(
        cls,
        transport: EtcdTransport,
        ttl: int,
        timeout: float,
        on_lost: list[LostCallback] | None = None,
    ) -> KeptLease:
        """Grant a lease and start keeping it alive.

        Raises EtcdConfigError when etcd raised the TTL (below its minimum).
        """
        sent = time.monotonic()
        response = await transport.grant(ttl, timeout)
        if ttl != response.TTL:
            with contextlib.suppress(Exception):
                await transport.revoke(response.ID, timeout)
            raise EtcdConfigError(
                f"lease ttl {ttl} s is below etcd's minimum lease TTL of {response.TTL} s"
            )
        lease = cls(transport, response.ID, ttl, sent, on_lost)
        lease._task = asyncio.create_task(lease._keep_alive(), name=f"etcd-lease-{lease.id:x}")
        return lease

    # -- state ---------------------------------------------------------------
    def valid(self) -> bool:
        """True while the lease is certainly alive in etcd; checks the deadline itself."""
        if self._lost_flag or self._closed:
            return False
        if time.monotonic() >= self.deadline:
            self._declare_lost(f"lease not renewed within its {self.ttl} s TTL")
            return False
        return True

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic()) if self.valid() else 0.0

    def add_lost_callback(self, callback: LostCallback) -> None:
        self._callbacks.append(callback)

    def _declare_lost(self, reason: str) -> None:
        """Mark lost now (any thread); fire the event and callbacks in the event loop."""
        if self._lost_flag or self._closed:
            return
        self._lost_flag = True
        self.lost_reason = reason
        log.warning("etcd lease %x lost: %s", self.id, reason)
        try:
            in_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            in_loop = False
        if in_loop:
            self._fire()
        else:  # e.g. a sync gRPC handler thread asked valid()
            self._loop.call_soon_threadsafe(self._fire)

    def _fire(self) -> None:
        self.lost.set()
        for callback in self._callbacks:
            try:
                callback(self.lost_reason)
            except Exception:
                log.exception("lease-lost callback failed")

    # -- keep-alive loop -----------------------------------------------------
    async def _keep_alive(self) -> None:
        interval = self.ttl / 3
        while not self._closed and self.valid():
            sent = time.monotonic()
            try:
                granted = await self.transport.keepalive_once(
                    self.id,
                    timeout=max(0.05, self.deadline - sent),  # a late answer still helps
                )
            except (EtcdUnavailableError, EtcdRequestError) as error:
                # Unknown: keep the old deadline and retry soon; only etcd's TTL 0
                # or the deadline itself ends the lease.
                log.debug("keep-alive of lease %x failed: %s", self.id, error)
                granted = -1
            if self._closed:
                return
            if granted == 0:
                self._declare_lost("etcd says the lease has expired or was revoked")
                return
            if not self.valid():
                return  # past the deadline even if etcd answered late: stay lost
            if granted > 0:
                self.deadline = sent + granted
                pause = interval - (time.monotonic() - sent)
            else:
                pause = min(0.2, interval)
            # Sleep until the next renewal, but wake at the deadline to signal loss on time.
            await asyncio.sleep(max(0.0, min(pause, self.deadline - time.monotonic())))

    async def revoke(self, timeout: float) -> None:
        """Stop renewing and revoke (the lease's keys vanish at once); idempotent."""
        if self._revoked:
            return
        self._revoked = True
        self.abandon()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(Exception):
            await self.transport.revoke(self.id, timeout)

    def abandon(self) -> None:
        """Stop renewing without talking to etcd (the lease then expires on its own)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
