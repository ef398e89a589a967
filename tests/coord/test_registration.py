"""Pserver registration against a real etcd: distinct indices, TTL expiry, shutdown."""

from __future__ import annotations

import asyncio
import functools
import signal
import time
from collections.abc import Callable

from coord.clients import etcd_client
from edl.coord import EtcdClient
from edl.coord.embedded import EmbeddedEtcd
from polling import eventually

TTL = 2
PREFIX = "/edl/test/job"


client = functools.partial(etcd_client, prefix=PREFIX, ttl=TTL)


async def test_concurrent_registration_gets_distinct_indices(etcd: EmbeddedEtcd) -> None:
    n = 6
    clients = [client(etcd, n) for _ in range(n)]
    try:
        indices = await asyncio.gather(*(c.register(7000 + i) for i, c in enumerate(clients)))
        assert sorted(indices) == list(range(n))
        listing = await clients[0].list_pservers()
        assert listing == {index: f"127.0.0.1:{7000 + i}" for i, index in enumerate(indices)}
        assert await clients[0].desired_pservers() == n
        assert all(c.lease_valid() and c.is_registered() for c in clients)
        # registering again while registered is idempotent
        assert await clients[0].register(7000) == indices[0]
    finally:
        await asyncio.gather(*(c.shutdown() for c in clients))


async def test_shutdown_frees_index_at_once_and_twice_is_harmless(etcd: EmbeddedEtcd) -> None:
    first, second, newcomer = client(etcd, 2), client(etcd, 2), client(etcd, 2)
    try:
        assert await first.register(7001) == 0
        assert await second.register(7002) == 1
        await first.put_key("checkpoints/0", b"meta", with_lease=True)
        await first.shutdown()
        await first.shutdown()
        # no waiting for a TTL: the lease was revoked, so the index is free now
        assert await newcomer.list_pservers() == {1: "127.0.0.1:7002"}
        assert await newcomer.get_key("checkpoints/0") == b""
        assert await newcomer.register(7003, timeout=10) == 0
    finally:
        for c in (first, second, newcomer):
            await c.shutdown()


async def test_keys_and_desired_count_have_no_lease(etcd: EmbeddedEtcd) -> None:
    pserver, reader = client(etcd, 3), client(etcd, 5)
    try:
        assert await reader.get_key("absent") == b""
        await pserver.register(7001)
        await pserver.put_key("config/x", b"1")  # without lease: configuration
        await pserver.shutdown()
        assert await reader.get_key("config/x") == b"1"
        # the desired count survives the pserver that published it (hole 6)
        assert await reader.desired_pservers() == 3
    finally:
        await reader.shutdown()


async def test_sigkilled_pserver_key_expires_and_newcomer_takes_its_index(
    etcd: EmbeddedEtcd, spawn: Callable
) -> None:
    watcher, newcomer = client(etcd, 2), client(etcd, 2)
    keeper = client(etcd, 2)
    try:
        assert await keeper.register(7000) == 0
        victim = spawn("pserver", etcd.endpoints, PREFIX, "7100", str(TTL))
        _, index = await asyncio.to_thread(victim.wait_for, "REGISTERED")
        assert index == "1"
        snapshots: list[dict[int, str]] = []

        async def watch() -> None:
            async for snapshot in watcher.watch_pservers():
                snapshots.append(snapshot)

        watching = asyncio.create_task(watch())
        await eventually(lambda: snapshots, 10, "first snapshot")
        assert snapshots[0] == {0: "127.0.0.1:7000", 1: "127.0.0.1:7100"}
        victim.signal(signal.SIGKILL)
        killed = time.monotonic()
        await eventually(
            lambda: snapshots[-1] == {0: "127.0.0.1:7000"}, TTL + 10, "watch reports the loss"
        )
        # the key lived on for about the TTL (not removed early by anything else)
        # (renewed every TTL/3, so at least 2/3 of a TTL was left when it was killed)
        assert time.monotonic() - killed >= TTL * 2 / 3 - 0.2
        assert await newcomer.register(7200, timeout=10) == 1
        await eventually(lambda: snapshots[-1].get(1) == "127.0.0.1:7200", 10, "newcomer seen")
        watching.cancel()
    finally:
        for c in (watcher, newcomer, keeper):
            await c.shutdown()


async def test_register_waits_for_a_free_index(etcd: EmbeddedEtcd) -> None:
    holder, waiter = client(etcd, 1), client(etcd, 1)
    try:
        await holder.register(7001)
        waiting = asyncio.create_task(waiter.register(7002, timeout=30))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        await holder.shutdown()
        assert await asyncio.wait_for(waiting, 30) == 0
    finally:
        await holder.shutdown()
        await waiter.shutdown()


async def test_cancelled_registration_leaves_no_claim(etcd: EmbeddedEtcd) -> None:
    """A register() cancelled mid-way (owner stopping) must not keep an index alive."""
    holder, cancelled, later = client(etcd, 1), client(etcd, 1), client(etcd, 1)
    try:
        await holder.register(7001)
        attempt = asyncio.create_task(cancelled.register(7002, timeout=None))
        await asyncio.sleep(0.5)  # it is waiting for the only index
        attempt.cancel()
        await asyncio.gather(attempt, return_exceptions=True)
        await holder.shutdown()
        # the cancelled client never claims the freed index behind our back
        assert await later.register(7003, timeout=10) == 0
        await asyncio.sleep(0.5)
        assert await later.list_pservers() == {0: "127.0.0.1:7003"}
    finally:
        for c in (holder, cancelled, later):
            await c.shutdown()


async def test_pserver_watch_survives_an_etcd_outage(etcd: EmbeddedEtcd) -> None:
    """The discovery watch re-lists after etcd comes back and keeps reporting changes."""
    # a TTL far above the outage, even on a loaded machine: the leases must survive it
    watcher, first, second = (
        EtcdClient(etcd.endpoints, 2, 5.0, 15, prefix=PREFIX) for _ in range(3)
    )
    snapshots: list[dict[int, str]] = []

    async def watch() -> None:
        async for snapshot in watcher.watch_pservers():
            snapshots.append(dict(snapshot))
            snapshot.clear()  # the caller's copy: the watch's own map must not change

    watching = asyncio.create_task(watch())
    try:
        assert await first.register(7001) == 0
        await eventually(lambda: snapshots[-1:] == [{0: "127.0.0.1:7001"}], 10, "first seen")
        await etcd.adown()
        await asyncio.sleep(0.5)
        await etcd.aup()
        assert await second.register(7002, timeout=30) == 1
        await eventually(
            lambda: snapshots[-1] == {0: "127.0.0.1:7001", 1: "127.0.0.1:7002"},
            30,
            "the watch reports a change made after the outage",
        )
        await second.shutdown()
        await eventually(lambda: snapshots[-1] == {0: "127.0.0.1:7001"}, 30, "and the next one")
    finally:
        watching.cancel()
        for c in (watcher, first, second):
            await c.shutdown()
