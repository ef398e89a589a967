"""A trainer's last Report reaches etcd before the trainer hears back: a finished job's
master is stopped as soon as its trainers exit, so the periodic publish may never come
(`edl run` then ended without the job's accuracy)."""

from __future__ import annotations

import asyncio

from edl.runtime.master.queue import TaskQueue
from edl.runtime.master.server import MasterService
from edl.runtime.proto import runtime_pb2 as pb


class SlowStore:
    """The n-th publish takes delays[n] seconds (0 past the list) before it writes."""

    def __init__(self, delays: tuple[float, ...] = (), failing: bool = False) -> None:
        self.delays = list(delays)
        self.failing = failing
        self.published: list[dict] = []

    async def load(self):  # pragma: no cover - not used here
        return None, []

    async def save(self, meta: dict | None, records: list[dict]) -> None:
        return None

    async def publish_progress(self, progress: dict) -> dict | None:
        await asyncio.sleep(self.delays.pop(0) if self.delays else 0.0)
        if self.failing:
            raise OSError("etcd unavailable")
        self.published.append(progress)
        return None


def service(store: SlowStore) -> MasterService:
    queue = TaskQueue(passes=1)
    queue.set_dataset(64, 16, 4)
    return MasterService(queue, store, on_lost=lambda: None)


def accuracy(progress: dict) -> float | None:
    return (progress.get("metrics") or {}).get("accuracy")


def test_a_report_is_published_before_it_is_answered() -> None:
    store = SlowStore()
    master = service(store)
    ack = asyncio.run(master.Report(pb.Metrics(trainer="t0", values={"accuracy": 0.97}), None))
    assert ack.accepted
    assert store.published and accuracy(store.published[-1]) == 0.97


def test_a_periodic_publish_in_flight_never_lands_after_the_report() -> None:
    store = SlowStore(delays=(0.05,))  # the older publish is the slower one
    master = service(store)

    async def race() -> None:
        periodic = asyncio.create_task(master.publish())  # snapshot taken before the report
        await asyncio.sleep(0)
        await master.Report(pb.Metrics(trainer="t0", values={"accuracy": 0.9}), None)
        await periodic

    asyncio.run(race())
    assert len(store.published) == 2
    assert accuracy(store.published[-1]) == 0.9


def test_an_etcd_failure_still_answers_and_the_next_publish_carries_the_metrics() -> None:
    store = SlowStore(failing=True)
    master = service(store)
    ack = asyncio.run(master.Report(pb.Metrics(trainer="t0", values={"accuracy": 0.8}), None))
    assert ack.accepted and not store.published
    store.failing = False
    asyncio.run(master.publish())
    assert accuracy(store.published[-1]) == 0.8
