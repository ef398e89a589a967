"""Lease loss: frozen processes, revoked leases and etcd restarts are noticed and healed."""

from __future__ import annotations

import asyncio
import functools
import signal
import time
from collections.abc import Callable

from coord.clients import etcd_client
from edl.coord import EtcdClient, EtcdUnavailableError
from edl.coord.embedded import EmbeddedEtcd
from polling import eventually

TTL = 2
PREFIX = "/edl/test/loss"
# etcd is being stopped and restarted here: an unavailable etcd means "not yet"
until = functools.partial(eventually, not_yet=(EtcdUnavailableError,))


client = functools.partial(etcd_client, prefix=PREFIX, ttl=TTL)


async def test_sigstopped_pserver_notices_lost_lease_before_serving(
    etcd: EmbeddedEtcd, spawn: Callable
) -> None:
    """Frozen longer than the TTL, its index is taken; on resume it refuses before anything."""
    replacement = client(etcd, 1)
    frozen = spawn("pserver", etcd.endpoints, PREFIX, "7100", str(TTL))
    try:
        await asyncio.to_thread(frozen.wait_for, "REGISTERED")
        await asyncio.to_thread(frozen.wait_for, "SERVE")
        stopped_at = frozen.freeze()  # after this, the child prints nothing until SIGCONT
        # the replacement gets index 0 once the frozen process's lease expires in etcd
        assert await replacement.register(7200, timeout=TTL + 15) == 0
        # renewed every TTL/3: at least 2/3 of a TTL was left at the freeze
        assert time.monotonic() - stopped_at >= TTL * 2 / 3 - 0.2
        frozen.signal(signal.SIGCONT)
        lost_at, reason = await asyncio.to_thread(frozen.wait_for, "LOST", 15, stopped_at)
        assert "TTL" in reason or "expired" in reason
        await asyncio.to_thread(frozen.wait_for, "REFUSE", 15, stopped_at)
        after_resume = [(w, s) for w, s, _ in frozen.lines if s > stopped_at]
        # nothing was served after the freeze: the first word after resume is LOST or REFUSE
        assert after_resume and all(word != "SERVE" for word, _ in after_resume), after_resume
        assert await replacement.list_pservers() == {0: "127.0.0.1:7200"}
        assert lost_at > stopped_at
    finally:
        frozen.signal(signal.SIGCONT)
        await replacement.shutdown()


async def test_lease_revoked_in_etcd_is_signalled(etcd: EmbeddedEtcd) -> None:
    victim, admin = client(etcd, 1), client(etcd, 1)
    reasons: list[str] = []
    victim.on_lease_lost(reasons.append)
    try:
        await victim.register(7001)
        lease_id = victim._lease.id  # type: ignore[union-attr]
        await admin.transport.revoke(lease_id, 5.0)  # etcd drops it (as on expiry)
        await asyncio.wait_for(victim.wait_lease_lost(), TTL + 5)
        assert not victim.lease_valid() and victim.index is None
        assert reasons and "etcd says" in reasons[0]
        assert await victim.register(7001, timeout=10) == 0  # may register again
        assert victim.lease_valid()
    finally:
        await victim.shutdown()
        await admin.shutdown()


async def test_etcd_restart_short_and_long_without_duplicate_index(etcd: EmbeddedEtcd) -> None:
    """Short restart: the lease survives.  Long outage: loss, then re-registration
    (keep=True) on the same index, never two keys for one process."""
    a, b = client(etcd, 2), client(etcd, 2)
    registered: list[int] = []
    a.on_registered(registered.append)
    try:
        assert await a.register(7001, keep=True) == 0
        assert await b.register(7002, keep=True) == 1
        await etcd.arestart()
        expected = {0: "127.0.0.1:7001", 1: "127.0.0.1:7002"}

        async def both_listed() -> bool:
            # a restart slower than the TTL (loaded machine) re-registers: poll, don't peek
            return await a.list_pservers() == expected

        await until(both_listed, 30, "etcd back with both pservers")

        # a long outage: both leases are declared lost locally while etcd is down
        await etcd.adown()
        await asyncio.wait_for(a.wait_lease_lost(), TTL + 5)
        assert not a.lease_valid()
        await asyncio.sleep(1.0)
        await etcd.aup()
        # etcd revives old leases on restart; keep=True revokes them and registers anew
        await until(
            lambda: (
                a.index is not None and b.index is not None and a.lease_valid() and b.lease_valid()
            ),
            20,
            "both re-registered",
        )
        await until(lambda: len(registered) == 2, 5, "on_registered fired")
        listing = await a.list_pservers()
        assert sorted(listing) == [0, 1]
        assert sorted(listing.values()) == ["127.0.0.1:7001", "127.0.0.1:7002"]
        assert {a.index, b.index} == {0, 1}
        # the revived old leases are gone, not lingering as a second claim
        await asyncio.sleep(TTL + 1)
        assert await a.list_pservers() == listing
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_shutdown_during_reregistration_claims_nothing(etcd: EmbeddedEtcd) -> None:
    """keep=True re-registers after a loss; shutdown() in the middle ends it for good."""
    owner, reader = client(etcd, 1), client(etcd, 1)
    try:
        assert await owner.register(7001, keep=True) == 0
        await etcd.adown()
        await asyncio.wait_for(owner.wait_lease_lost(), TTL + 5)
        retrying = owner._reregister_task
        assert retrying is not None and not retrying.done()
        await asyncio.wait_for(owner.shutdown(), 15)
        assert retrying.done()
        await etcd.aup()
        await until(reader.desired_pservers, 30, "etcd back")
        # etcd revived the old lease: it must still expire, and nothing claims index 0 again
        await until(lambda: _listing_is(reader, {}), 3 * TTL + 10, "the old claim to expire")
        await asyncio.sleep(1.0)
        assert await reader.list_pservers() == {}
    finally:
        await owner.shutdown()
        await reader.shutdown()


async def _listing_is(reader: EtcdClient, expected: dict[int, str]) -> bool:
    return await reader.list_pservers() == expected
