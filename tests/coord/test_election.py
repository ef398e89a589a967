"""Master election on a real etcd: failover after SIGKILL, fencing of a deposed leader."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import time
from collections.abc import Callable

import pytest

from coord.clients import etcd_client
from edl.coord import Election, EtcdClient, NotLeaderError, keys, leader_address, watch_leader
from edl.coord.embedded import EmbeddedEtcd

TTL = 2
PREFIX = "/edl/test/election"
# etcd checks lease expiry about every 0.5 s; allow for a loaded 2-core machine on top
# of the TTL + 1 s target (bench/etcd.py measures the real figure).
FAILOVER_BOUND = TTL + 1.0 + 3.0


client = functools.partial(etcd_client, prefix=PREFIX, ttl=TTL)


async def history(observer: EtcdClient, key: str) -> list[bytes]:
    """Every value ``<prefix>/<key>`` ever had, in order, from etcd's revision log."""
    full_key = keys.under(observer.prefix, key)
    current = await observer.transport.range(full_key, 5.0)
    last = int(current.kvs[0].mod_revision) if current.kvs else 0
    values: list[bytes] = []

    async def collect() -> None:
        async for _revision, events in observer.transport.watch(full_key, 1):
            values.extend(bytes(e.kv.value) for e in events if e.type == e.PUT)
            if any(e.kv.mod_revision >= last for e in events):
                return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(collect(), 5.0)
    return values


def assert_one_handover(values: list[bytes], old: bytes, new: bytes) -> None:
    assert values and values[0] == old and values[-1] == new, values
    first_new = values.index(new)
    assert set(values[first_new:]) == {new}, f"{old!r} wrote after {new!r} took over"


async def test_killed_leader_is_replaced_within_bound(etcd: EmbeddedEtcd, spawn: Callable) -> None:
    observer = client(etcd)
    try:
        first = spawn("candidate", etcd.endpoints, PREFIX, "alpha", str(TTL))
        await asyncio.to_thread(first.wait_for, "WROTE")
        second = spawn("candidate", etcd.endpoints, PREFIX, "beta", str(TTL))
        await asyncio.to_thread(second.wait_for, "CAMPAIGN")
        await asyncio.sleep(0.5)
        assert await leader_address(observer) == "alpha:1"
        assert not any(word == "LEADER" for word, _, _ in second.lines)
        first.signal(signal.SIGKILL)
        killed = time.monotonic()
        elected, _revision = await asyncio.to_thread(second.wait_for, "LEADER", 30)
        assert elected - killed <= FAILOVER_BOUND, f"failover took {elected - killed:.2f} s"
        await asyncio.to_thread(second.wait_for, "WROTE", 10, elected)
        assert await leader_address(observer) == "beta:1"
        state = await observer.get_key("state/owner")
        assert state == b"beta"
        assert_one_handover(await history(observer, "state/owner"), b"alpha", b"beta")
    finally:
        await observer.shutdown()


async def test_frozen_leader_is_fenced_after_resume(etcd: EmbeddedEtcd, spawn: Callable) -> None:
    observer = client(etcd)
    try:
        first = spawn("candidate", etcd.endpoints, PREFIX, "alpha", str(TTL))
        await asyncio.to_thread(first.wait_for, "WROTE")
        second = spawn("candidate", etcd.endpoints, PREFIX, "beta", str(TTL))
        await asyncio.to_thread(second.wait_for, "CAMPAIGN")
        frozen = first.freeze()
        await asyncio.to_thread(second.wait_for, "WROTE", 30)
        first.signal(signal.SIGCONT)
        await asyncio.to_thread(first.wait_for, "DEPOSED", 15, frozen)
        await asyncio.sleep(0.3)
        assert await observer.get_key("state/owner") == b"beta"
        # etcd's own history: once beta wrote, alpha never wrote again (a write that
        # was in flight at the freeze may land before beta's term, never after)
        assert_one_handover(await history(observer, "state/owner"), b"alpha", b"beta")
    finally:
        first.signal(signal.SIGCONT)
        await observer.shutdown()


async def test_deposed_leader_write_is_rejected_by_etcd(etcd: EmbeddedEtcd) -> None:
    """A leader that wrongly believes it still leads (its lease expired unnoticed, as in a
    one-way partition) still cannot write: etcd rejects the fenced txn."""
    a_client, b_client = client(etcd), client(etcd)
    a, b = Election(a_client, "a:1"), Election(b_client, "b:1")
    try:
        first_revision = await a.campaign(timeout=10)
        await a.store.commit(puts={"tasks/1": b"todo", "tasks/2": b"todo"})
        # cut a off from etcd's view: stop its keep-alive, let its lease vanish in etcd,
        # but keep its local belief (deadline far ahead)
        assert a._lease is not None
        a._lease._task.cancel()  # type: ignore[union-attr]
        a._lease.deadline = time.monotonic() + 3600
        await b_client.transport.revoke(a._lease.id, 5.0)
        second_revision = await b.campaign(timeout=10)
        assert second_revision > first_revision
        await b.store.put("tasks/1", b"done-by-b")
        assert a.is_leader()  # a still believes it leads...
        with pytest.raises(NotLeaderError, match="rejected"):
            await a.store.commit(puts={"tasks/1": b"stale"}, deletes=["tasks/2"])
        assert not a.is_leader() and a.lost.is_set()
        assert await b.store.get_prefix("tasks/") == {"tasks/1": b"done-by-b", "tasks/2": b"todo"}
        assert await b.leader() == "b:1"
    finally:
        await a.resign()
        await b.resign()
        await a_client.shutdown()
        await b_client.shutdown()


async def test_resign_hands_over_and_watchers_follow(etcd: EmbeddedEtcd) -> None:
    # A long TTL makes "no TTL wait" measurable with a wide margin on a loaded machine.
    long_ttl = 12
    clients = [EtcdClient(etcd.endpoints, 1, 5.0, long_ttl, prefix=PREFIX) for _ in range(3)]
    a, b = Election(clients[0], "a:1"), Election(clients[1], "b:1")
    seen: list[str | None] = []

    async def follow() -> None:
        async for address in watch_leader(clients[2]):
            seen.append(address)

    watching = asyncio.create_task(follow())
    try:
        await a.campaign(timeout=10)
        waiting = asyncio.create_task(b.campaign(timeout=20))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        started = time.monotonic()
        await a.resign()
        await asyncio.wait_for(waiting, 10)
        assert time.monotonic() - started < long_ttl / 2  # resign needs no TTL wait
        with pytest.raises(NotLeaderError):
            await a.store.put("x", b"1")
        # many operations are split into several fenced txns (etcd allows 128 per txn)
        many = {f"tasks/{i:04d}": b"todo" for i in range(300)}
        await b.store.commit(puts=many)
        assert len(await b.store.get_prefix("tasks/")) == 300
        deadline = time.monotonic() + 10
        while seen[-1:] != ["b:1"] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert seen[0] in ("a:1", None) and seen[-1] == "b:1"
    finally:
        watching.cancel()
        await a.resign()
        await b.resign()
        for c in clients:
            await c.shutdown()


async def test_campaign_timeout(etcd: EmbeddedEtcd) -> None:
    a_client, b_client = client(etcd), client(etcd)
    a, b = Election(a_client, "a:1"), Election(b_client, "b:1")
    try:
        await a.campaign(timeout=10)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await b.campaign(timeout=1.0)
        # timeout + one revoke of the campaign's lease; loop lag on a loaded machine
        assert time.monotonic() - started < 1.0 + 5.0
    finally:
        await a.resign()
        await b.resign()
        await a_client.shutdown()
        await b_client.shutdown()


async def test_leader_through_an_etcd_outage(etcd: EmbeddedEtcd) -> None:
    """etcd down longer than the TTL: the leader learns it lost the lock, campaigns
    again once etcd is back, and its old fencing token no longer writes."""
    leader_client = client(etcd)
    leader = Election(leader_client, "a:1")
    try:
        old_token = await leader.campaign(timeout=10)
        await etcd.adown()
        await asyncio.wait_for(leader.lost.wait(), TTL + 5)
        assert not leader.is_leader()
        with pytest.raises(NotLeaderError):
            await leader.store.put("x", b"1")
        await etcd.aup()
        new_token = await leader.campaign(timeout=30)
        assert new_token > old_token and leader.is_leader()
        await leader.store.put("x", b"2")
        assert await leader.store.get("x") == b"2"
        assert await leader.leader() == "a:1"
    finally:
        await leader.resign()
        await leader_client.shutdown()


async def test_an_etcd_outage_is_logged_sparsely_and_watchers_come_back(
    etcd: EmbeddedEtcd, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 12: with etcd gone, campaigning and watching members logged every 200 ms
    (~570 lines in 2 minutes). Now they back off (<= 2 s) and log the 1st, 2nd, 4th ...
    failure only, and still find etcd again within the back-off cap once it is back.

    The outage lasts 6 s (it was 12): the old fixed 200 ms retry logged ~30 lines in
    6 s, so the bound of 12 still tells the two apart."""
    caplog.set_level("INFO", logger="edl.coord")
    candidate_client, watcher_client = client(etcd), client(etcd)
    seen: list[str | None] = []

    async def watch() -> None:
        async for address in watch_leader(watcher_client):
            seen.append(address)

    watcher = asyncio.create_task(watch())
    candidate = Election(candidate_client, "b:1")
    try:
        await asyncio.sleep(0.5)
        await etcd.adown()
        campaign = asyncio.create_task(candidate.campaign(timeout=60))
        await asyncio.sleep(6)  # 30 retries at the old fixed 200 ms
        retries = [r for r in caplog.records
                   if "retrying" in r.message or "re-listing" in r.message]
        assert 2 <= len(retries) <= 12, [r.message for r in retries]
        back = time.monotonic()
        await etcd.aup()
        await asyncio.wait_for(campaign, 20)
        await asyncio.wait_for(_until(lambda: seen and seen[-1] == "b:1"), 20)
        assert time.monotonic() - back < 15
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await candidate.resign()
        await candidate_client.shutdown()
        await watcher_client.shutdown()


async def _until(predicate: Callable[[], object]) -> None:
    while not predicate():
        await asyncio.sleep(0.1)
