"""A deposed leader writes nothing: writes are fenced on the Lease, and the Lease is
released only with the resourceVersion last read (kmock's emulator over HTTP)."""

from __future__ import annotations

import asyncio
from typing import Any

import kmock
import pytest
from lightkube import AsyncClient
from lightkube.resources.batch_v1 import Job
from lightkube.resources.coordination_v1 import Lease
from lightkube.types import PatchType

from edl.cluster.port import NotLeaderError
from edl.kube.cluster import KubeCluster
from edl.kube.leader import LeaderElector

JOBS = kmock.resource("batch/v1/jobs")


class FakeClock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def elector(api: AsyncClient, identity: str, clock: Any) -> LeaderElector:
    return LeaderElector(api, namespace="edl-system", name="edl-controller", identity=identity,
                         lease_duration=15.0, renew_deadline=10.0, retry_period=2.0, clock=clock)


async def test_the_fence_closes_at_the_renew_deadline(api: AsyncClient) -> None:
    clock = FakeClock()
    leader = elector(api, "a", clock)
    assert not leader.holds_lease()
    assert await leader.try_acquire_or_renew()
    leader.is_leader = True
    assert leader.holds_lease()
    clock.now = 9.9
    assert leader.holds_lease()
    clock.now = 10.0  # no renewal for renew_deadline: a standby may be about to lead
    assert not leader.holds_lease()
    assert await leader.try_acquire_or_renew()
    assert leader.holds_lease()


async def test_a_fenced_cluster_sends_no_write(api: AsyncClient, emulator: Any) -> None:
    await api.create(Job.from_dict({
        "metadata": {"name": "j-trainer", "namespace": "default"},
        "spec": {"parallelism": 2, "template": {"spec": {"containers": [
            {"name": "trainer", "image": "edl"}], "restartPolicy": "Never"}}}}),
        namespace="default")
    leading = {"now": True}
    cluster = KubeCluster(api, fence=lambda: leading["now"])
    patches: list[str] = []

    def record(request: Any) -> bool:  # never matches: counts the PATCHes that arrive
        if request.resource == JOBS and request.method == "PATCH":
            patches.append(request.url.path)
        return False

    emulator.fail_next(record, 500, times=10**9)
    job = await cluster.get_trainer_job_by_name("default", "j-trainer")
    job["spec"]["parallelism"] = 3
    job = await cluster.update_trainer_job(job)
    assert len(patches) == 1
    leading["now"] = False
    job["spec"]["parallelism"] = 4
    with pytest.raises(NotLeaderError):
        await cluster.update_trainer_job(job)
    with pytest.raises(NotLeaderError):
        await cluster.update_training_job_status("default", "j", {"state": "Running"})
    assert len(patches) == 1  # nothing left this replica once it could not renew
    assert (await cluster.get_trainer_job_by_name("default", "j-trainer"))[
        "spec"]["parallelism"] == 3  # reads still work


async def test_release_does_not_overwrite_a_successor(api: AsyncClient) -> None:
    clock = FakeClock()
    old = elector(api, "old", clock)
    assert await old.try_acquire_or_renew()
    old.is_leader = True
    # a successor took the Lease (the old leader was partitioned past the duration)
    await api.patch(Lease, "edl-controller", {"spec": {"holderIdentity": "new"}},
                    namespace="edl-system", patch_type=PatchType.MERGE)
    await old.release()
    lease = await api.get(Lease, "edl-controller", namespace="edl-system")
    assert lease.spec.holderIdentity == "new"


async def test_release_gives_up_our_own_lease(api: AsyncClient) -> None:
    leader = elector(api, "a", FakeClock())
    assert await leader.try_acquire_or_renew()
    leader.is_leader = True
    await leader.release()
    lease = await api.get(Lease, "edl-controller", namespace="edl-system")
    assert lease.spec.holderIdentity is None


async def test_a_fenced_event_is_dropped_not_raised_to_kopf(api: AsyncClient) -> None:
    """kopf retries a handler that raises; a write fenced off for good must not loop."""
    cluster = KubeCluster(api, fence=lambda: False)

    class Writes:
        calls = 0

        async def on_add(self, obj: Any) -> None:
            self.calls += 1
            await cluster.update_training_job_status("default", "j", {"state": "Running"})

    handler = Writes()
    cluster.watch_training_jobs(handler)  # type: ignore[arg-type]
    await asyncio.sleep(0.1)  # the subscription (a replay task) lands
    await cluster.dispatch_add({"metadata": {"name": "j", "namespace": "default"}})
    assert handler.calls == 1


async def test_release_after_an_unread_renewal_still_gives_the_lease_up(api: AsyncClient) -> None:
    """Our last renewal landed but its answer was never read (cancelled at shutdown)."""
    leader = elector(api, "a", FakeClock())
    assert await leader.try_acquire_or_renew()
    leader.is_leader = True
    await api.patch(Lease, "edl-controller", {"spec": {"renewTime": "2026-11-30T17:00:00.000000Z"}},
                    namespace="edl-system", patch_type=PatchType.MERGE)  # rv moves, holder a
    await leader.release()
    lease = await api.get(Lease, "edl-controller", namespace="edl-system")
    assert lease.spec.holderIdentity is None
