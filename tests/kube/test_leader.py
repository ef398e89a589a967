"""Lease election against kmock's emulator over HTTP (real lightkube client).

The emulator extension in conftest.py enforces resourceVersion preconditions,
which is what makes two racing candidates resolve to one leader.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease

from edl.kube.client import make_client
from edl.kube.leader import LeaderElector, LeaseLost
from edl.procs import free_port


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def elector(api: AsyncClient, identity: str, clock: Any = None, **kw: Any) -> LeaderElector:
    params = dict(lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)
    params.update(kw)
    if clock is not None:
        params["clock"] = clock
    return LeaderElector(api, namespace="edl-system", name="edl-controller",
                         identity=identity, **params)


async def test_first_candidate_wins_second_waits(api: AsyncClient) -> None:
    a, b = elector(api, "a"), elector(api, "b")
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert await a.try_acquire_or_renew()  # renew
    lease = await api.get(Lease, "edl-controller", namespace="edl-system")
    assert lease.spec.holderIdentity == "a"


async def test_racing_candidates_for_an_expired_lease_yield_one_leader(api: AsyncClient) -> None:
    old = elector(api, "old")
    assert await old.try_acquire_or_renew()
    clock = FakeClock()
    candidates = [elector(api, f"c{i}", clock) for i in range(3)]
    # Each candidate observes the record, then time passes beyond the lease duration.
    assert not any([await c.try_acquire_or_renew() for c in candidates])
    clock.now = 10.0
    results = await asyncio.gather(*(c.try_acquire_or_renew() for c in candidates))
    assert sorted(results) == [False, False, True]
    lease = await api.get(Lease, "edl-controller", namespace="edl-system")
    winner = candidates[results.index(True)].identity
    assert lease.spec.holderIdentity == winner
    assert lease.spec.leaseTransitions == 1


async def test_standby_takes_over_when_the_leader_dies(api: AsyncClient) -> None:
    a, b = elector(api, "a"), elector(api, "b")
    a_working, b_working = asyncio.Event(), asyncio.Event()

    async def work(flag: asyncio.Event) -> None:
        flag.set()
        await asyncio.Event().wait()

    leader = asyncio.create_task(a.run_as_leader(lambda: work(a_working)))
    await asyncio.wait_for(a_working.wait(), 20)
    standby = asyncio.create_task(b.run_as_leader(lambda: work(b_working)))
    await asyncio.sleep(1.0)
    assert not b_working.is_set(), "standby ran while the leader renewed"
    # Kill the leader without releasing (as a crashed pod would): renewals stop.
    a.release = _no_release  # type: ignore[method-assign]
    leader.cancel()
    await asyncio.gather(leader, return_exceptions=True)
    await asyncio.wait_for(b_working.wait(), 30)
    assert b.is_leader
    standby.cancel()
    await asyncio.gather(standby, return_exceptions=True)


async def _no_release() -> None:
    return None


async def test_clean_shutdown_releases_for_a_fast_takeover(api: AsyncClient) -> None:
    a = elector(api, "a", lease_duration=30, renew_deadline=20, retry_period=0.2)
    done = asyncio.Event()

    async def short_work() -> None:
        done.set()

    await a.run_as_leader(short_work)
    assert done.is_set()
    lease = await api.get(Lease, "edl-controller", namespace="edl-system")
    assert lease.spec.holderIdentity is None
    # A lease without a holder is free at once: no need to wait for its duration (30 s).
    b = elector(api, "b", lease_duration=30, renew_deadline=20, retry_period=0.2)
    assert await b.try_acquire_or_renew()


async def test_a_standby_stopped_as_its_takeover_write_lands_gives_the_lease_up(
    api: AsyncClient, monkeypatch: Any
) -> None:
    """Both replicas deleted: the leader released the Lease and the standby's next round
    took it, but the standby's SIGTERM landed before it read the answer. It never knew
    it led, so it exited with the Lease still naming it (until a new replica waited out
    the duration); now it reads the Lease on the way out and releases it."""
    leader = elector(api, "leader")
    assert await leader.try_acquire_or_renew()
    leader.is_leader = True
    await leader.release()  # the leader's clean exit: no holder
    landed = asyncio.Event()
    patch = api.patch

    async def write_then_no_answer(*args: Any, **kwargs: Any) -> Any:
        await patch(*args, **kwargs)
        landed.set()
        await asyncio.Event().wait()  # the answer never read: the stop comes first

    monkeypatch.setattr(api, "patch", write_then_no_answer)
    standby = elector(api, "standby")
    worked = asyncio.Event()

    async def work() -> None:
        worked.set()

    task = asyncio.create_task(standby.run_as_leader(work))
    await asyncio.wait_for(landed.wait(), 20)
    lease = await api.get(Lease, "edl-controller", namespace="edl-system")
    assert lease.spec.holderIdentity == "standby"  # its write landed
    monkeypatch.setattr(api, "patch", patch)  # the release's own write is answered
    task.cancel()  # SIGTERM
    await asyncio.gather(task, return_exceptions=True)
    assert not worked.is_set() and not standby.is_leader
    lease = await api.get(Lease, "edl-controller", namespace="edl-system")
    assert lease.spec.holderIdentity is None


async def test_leader_that_cannot_renew_steps_down(api: AsyncClient, emulator: Any) -> None:
    a = elector(api, "a")
    emulator_fault = None
    working = asyncio.Event()

    async def work() -> None:
        working.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(a.run_as_leader(work))
    await asyncio.wait_for(working.wait(), 20)
    emulator_fault = emulator.fail_next(lambda r: r.resource is not None
                                        and r.resource.plural == "leases", 503, times=1000)
    try:
        await asyncio.wait_for(task, 30)
    except LeaseLost:
        pass
    else:
        raise AssertionError("run_as_leader returned without losing leadership")
    assert emulator_fault.hits > 0
    assert not a.is_leader


async def test_a_renewal_completing_as_the_leader_stops_does_not_keep_it_renewing(
    api: AsyncClient, monkeypatch: Any
) -> None:
    """The flake of tests/kube/test_controller_kmock.py::test_broken_watches_resume (its
    teardown timed out after 120 s, the Lease renewal task stuck "cancelling" in its
    loop): Python 3.11's `asyncio.wait_for` returns the result, swallowing the cancel,
    when its awaitable completes in the same loop iteration as the cancel arrives. The
    renewal loop waited that way, so it renewed on and the leader's stop waited for ever.
    """
    leader = elector(api, "a", retry_period=0.01)
    renewing = asyncio.Event()
    answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    async def renewal_we_control() -> bool:
        renewing.set()
        return await answer

    monkeypatch.setattr(leader, "try_acquire_or_renew", renewal_we_control)
    task = asyncio.create_task(leader.keep_renewing())
    await asyncio.wait_for(renewing.wait(), 10)
    answer.set_result(True)  # the renewal completes ...
    task.cancel()  # ... as the leader is stopped
    await asyncio.wait({task}, timeout=10)
    stopped = task.cancelled()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert stopped


async def test_a_refused_lease_is_remembered_with_the_lease_and_a_hint(
        api: AsyncClient, emulator: Any) -> None:
    a = elector(api, "a", retry_period=0.05, renew_deadline=0.5, lease_duration=1.0)
    fault = emulator.fail_next(lambda r: r.resource is not None
                               and r.resource.plural == "leases", 403, times=10_000)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(a.acquire(), 0.5)
    assert fault.hits > 0 and not a.is_leader
    assert a.last_error is not None
    assert a.last_error.startswith("Lease edl-system/edl-controller: 403")
    assert "--lease-namespace=edl-system" in a.last_error  # the hint names the flag
    fault.remaining = 0  # RBAC fixed: the next round wins and the error is gone
    await asyncio.wait_for(a.acquire(), 20)
    assert a.is_leader and a.last_error is None


async def test_an_unreachable_api_server_is_named_by_its_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    client = make_client(url, timeout=2)
    try:
        candidate = LeaderElector(client, namespace="edl-system", name="edl-controller",
                                  identity="a", lease_duration=2.0, renew_deadline=1.5,
                                  retry_period=0.1, server=url)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(candidate.acquire(), 1.0)
        assert not candidate.is_leader
        assert candidate.last_error is not None
        assert f"cannot reach the API server at {url}" in candidate.last_error
    finally:
        await client.close()


async def test_a_stop_landing_as_the_new_leaders_caches_sync_is_not_lost(
    api: AsyncClient, monkeypatch: Any
) -> None:
    """A standby that just took the Lease starts its caches; a SIGTERM landing in the
    loop iteration their sync completes was swallowed by Python 3.11's
    `asyncio.wait_for`: the leader's work ran on, its stop waited for it until the
    kubelet's SIGKILL, and the Lease was never released."""
    from edl.kube.cluster import KubeCluster

    cluster = KubeCluster(api)
    idle = asyncio.Event()
    for reflector in cluster.reflectors():  # no watching: the syncs below are ours
        monkeypatch.setattr(reflector, "run", idle.wait)
    loop = asyncio.get_running_loop()
    syncs = [loop.create_future(), loop.create_future()]
    monkeypatch.setattr(cluster.node_reflector.synced, "wait", lambda: syncs[0])
    monkeypatch.setattr(cluster.pod_reflector.synced, "wait", lambda: syncs[1])
    start = asyncio.create_task(cluster.start())
    for _ in range(3):
        await asyncio.sleep(0)  # start() now waits for both caches
    for sync in syncs:
        sync.set_result(None)  # the caches sync ...
    start.cancel()  # ... as the stop arrives
    await asyncio.wait({start}, timeout=10)
    stopped = start.cancelled()
    await cluster.stop()
    assert stopped, "the stop was swallowed: start() returned as if nothing happened"
